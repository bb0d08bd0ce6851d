//go:build gpusnap_common

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"
)

// The common gpusnap, which make builds with the gpusnap_common tag, leaves
// out the packages only a long-running command needs, whose initialisers
// every command paid for at start-up (docs/performance.md, Start-up). Those
// commands run in gpusnap-full, the same source built with every command.
// Its name and the places it is looked for are these, relative to this
// binary and never through PATH, as docs/install.md lists them.
const fullName = "gpusnap-full"

func fullPaths(exe string) []string {
	dir := filepath.Dir(exe)
	return []string{filepath.Join(dir, fullName), filepath.Join(dir, "..", "libexec", "gpusnap", fullName)}
}

// nriAction hands the NRI plugin (containerd's NRI, its WebAssembly runtime
// and ttrpc) to gpusnap-full.
func nriAction() cli.ActionFunc { return execFull }

// execFull replaces this process by gpusnap-full with the same arguments,
// environment and descriptors, so that the command's output, signals and
// exit status are gpusnap-full's. Where none is installed it fails closed,
// naming the paths it tried.
func execFull(c *cli.Context) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("%s runs in %s, and this binary's path is unknown: %w", c.Command.Name, fullName, err)
	}
	var tried []string
	for _, p := range fullPaths(exe) {
		err := syscall.Exec(p, os.Args, os.Environ())
		tried = append(tried, fmt.Sprintf("%s: %v", p, err))
	}
	return fmt.Errorf("%s runs in %s, which cannot be run (%s)", c.Command.Name, fullName, strings.Join(tried, "; "))
}

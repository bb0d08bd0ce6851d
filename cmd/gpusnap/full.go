//go:build gpusnap_common

package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/gpusnap/gpusnap/internal/safepath"
	"github.com/gpusnap/gpusnap/watch"
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

// watchAction hands watch --listen (client_golang's registry, its process
// and Go collectors, and the HTTP server) to gpusnap-full. A watch without
// it runs here.
func watchAction() cli.ActionFunc {
	run := action(parseWatch, runWatch)
	return func(c *cli.Context) error {
		if c.String("listen") != "" {
			return execFull(c)
		}
		return run(c)
	}
}

// listenMetrics is never reached in this build, since watchAction hands
// --listen over first. It fails closed should that change.
func listenMetrics(globals, string) (watch.Metrics, func(), error) {
	return nil, nil, errors.New("watch --listen runs in " + fullName)
}

// execFull replaces this process by gpusnap-full with the same arguments,
// environment and descriptors, so that the command's output, signals and
// exit status are gpusnap-full's. Where none may run it fails closed,
// naming the paths it tried and why each was refused.
func execFull(c *cli.Context) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("%s runs in %s, and this binary's path is unknown: %w", c.Command.Name, fullName, err)
	}
	// A common build installed under gpusnap-full's name would find itself
	// beside itself and exec itself without end.
	if filepath.Base(exe) == fullName {
		return fmt.Errorf("%s runs in %s, and %s is gpusnap's common build installed under that name", c.Command.Name, fullName, exe)
	}
	if err := c.Context.Err(); err != nil {
		return err // a stop signal that came before the hand-off
	}
	var tried []string
	for _, p := range fullPaths(exe) {
		f, err := openFull(p)
		if err == nil {
			// The file checked is the file run: exec goes through its
			// descriptor, which the exec closes.
			err = syscall.Exec(fmt.Sprintf("/proc/self/fd/%d", f.Fd()), os.Args, os.Environ())
			f.Close()
		}
		tried = append(tried, fmt.Sprintf("%s: %v", p, err))
	}
	return fmt.Errorf("%s runs in %s, which cannot be run (%s)", c.Command.Name, fullName, strings.Join(tried, "; "))
}

// openFull opens the gpusnap-full at path, refusing one that another user
// could have put there or changed. It would run with this process's
// privileges, as root's gpusnap in a Slurm prolog or a node agent runs.
func openFull(path string) (*os.File, error) {
	trusted := uint32(os.Geteuid())
	resolved, err := safepath.Resolve(path, trusted)
	if err == nil {
		err = safepath.CheckAncestors(resolved, trusted)
	}
	if err == nil {
		err = ownedDir(filepath.Dir(resolved), trusted)
	}
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(resolved, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	switch {
	case err != nil:
	case !fi.Mode().IsRegular():
		err = fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
	case safepath.Owner(fi) != trusted && safepath.Owner(fi) != 0:
		err = fmt.Errorf("owned by uid %d", safepath.Owner(fi))
	case fi.Mode().Perm()&0o022 != 0:
		err = fmt.Errorf("writable by its group or others (mode %04o)", fi.Mode().Perm())
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// ownedDir refuses a directory where another user could replace the file
// that is about to run: one owned by another user, or writable by its group
// or others.
func ownedDir(dir string, trusted uint32) error {
	fi, err := os.Stat(dir)
	switch {
	case err != nil:
		return err
	case safepath.Owner(fi) != trusted && safepath.Owner(fi) != 0:
		return fmt.Errorf("%s is owned by uid %d, who could replace what it holds", dir, safepath.Owner(fi))
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("%s is writable by its group or others (mode %04o), who could replace what it holds", dir, fi.Mode().Perm())
	}
	return nil
}

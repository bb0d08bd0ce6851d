package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/NVIDIA/go-nvml/pkg/dl"
	"github.com/urfave/cli/v2"
)

// version, commit and buildDate are set at build time (the Makefile passes
// -ldflags "-X main.version=... -X main.commit=... -X main.buildDate=...").
// Left unset, buildVersion and buildCommit take what the Go toolchain
// recorded, so a snapshot taken as evidence says which gpusnap took it.
var (
	version   = ""
	commit    = ""
	buildDate = ""
)

// nvmlLibrary is the name libnvidia-ml is loaded by, as go-nvml loads it.
const nvmlLibrary = "libnvidia-ml.so.1"

// buildVersion is the version recorded in snapshots and printed by --version.
func buildVersion() string {
	if version != "" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	rev, dirty := vcsRevision(info)
	if rev == "" {
		return "dev"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return "dev+" + rev
}

// buildCommit is the commit the binary was built from, or "unknown".
func buildCommit() string {
	if commit != "" {
		return commit
	}
	if info, ok := debug.ReadBuildInfo(); ok {
		if rev, dirty := vcsRevision(info); rev != "" {
			if dirty {
				rev += "-dirty"
			}
			return rev
		}
	}
	return "unknown"
}

func vcsRevision(info *debug.BuildInfo) (rev string, dirty bool) {
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	return rev, dirty
}

// nvmlFound says whether the dynamic linker finds libnvidia-ml. It only
// loads the library and never calls into it, so a hung driver cannot hang
// --version, and a failed nvmlInit is what the commands report.
func nvmlFound() string {
	lib := dl.New(nvmlLibrary, dl.RTLD_LAZY|dl.RTLD_LOCAL)
	if err := lib.Open(); err != nil {
		return "not found (" + err.Error() + ")"
	}
	_ = lib.Close()
	return "found"
}

// printVersion is --version, what an operator pins and files a bug with.
func printVersion(c *cli.Context) {
	date := buildDate
	if date == "" {
		date = "unknown"
	}
	w := c.App.Writer
	fmt.Fprintf(w, "gpusnap version %s\n", c.App.Version)
	fmt.Fprintf(w, "commit:       %s\n", buildCommit())
	fmt.Fprintf(w, "built:        %s\n", date)
	fmt.Fprintf(w, "go:           %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(w, "libnvidia-ml: %s\n", nvmlFound())
}

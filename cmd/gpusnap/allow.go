package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/gpusnap/gpusnap/diff"
)

// allowFlag is --allow of every command that judges. It names the package's
// allow list (diff.DefaultAllowPath) unless another is given, "" for none.
func allowFlag(usage string) cli.Flag {
	return &cli.StringFlag{Name: "allow", Value: diff.DefaultAllowPath, EnvVars: []string{"GPUSNAP_ALLOW"},
		Usage: usage + " (`FILE`; format in docs/diff.md; \"\" for none; the default is read where it exists)"}
}

// loadAllow reads --allow. The default, not asked for and absent (a host
// without the package), is no list, and any list asked for that cannot be
// read is an error. An exe entry no checksum vouches for is warned of on stderr.
func loadAllow(c *cli.Context) (*diff.AllowList, error) {
	path := c.String("allow")
	if path == "" {
		return nil, nil
	}
	if path == diff.DefaultAllowPath && !c.IsSet("allow") {
		fi, err := os.Lstat(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		if err == nil {
			if err := rootsAlone(fi); err != nil {
				return nil, fmt.Errorf("allow list %s: %w", path, err)
			}
		}
	}
	a, err := diff.LoadAllow(path)
	if err != nil {
		return nil, err
	}
	for _, w := range a.Weak {
		fmt.Fprintf(c.App.ErrWriter, "gpusnap: allow list %s: an exe outside the packages' directories, pinned by no sha256: a binary put at that path passes it\n", w)
	}
	return a, nil
}

// rootsAlone refuses a default allow list another user could have written,
// since its entries clear findings on every command that judges.
func rootsAlone(fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular():
		return fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
	case !ok || st.Uid != 0:
		return errors.New("not owned by root: another user could have written it")
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("writable by its group or others (mode %04o)", fi.Mode().Perm())
	}
	return nil
}

package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/gpusnap/gpusnap/internal/safepath"
)

// checkPath refuses, for a store opened as trusted (root), a path another
// user could redirect or tamper with, because root reads the command lines
// stored there. Refused are another user's symlink on the way, and a store
// directory or file not owned by trusted or writable by group or others.
// Missing parts are fine, since Open creates them 0700.
func checkPath(path string, trusted uint32) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	refuse := func(format string, args ...any) error {
		return fmt.Errorf("%w: refusing store %s: %s (the store holds command lines, which can hold secrets)",
			ErrUnsafePath, path, fmt.Sprintf(format, args...))
	}
	cur, err := safepath.Resolve(abs, trusted)
	if err != nil {
		return refuse("%v", err)
	}
	// An ancestor another user could write lets them move the store away
	// and put their own in its place.
	if err := safepath.CheckAncestors(cur, trusted); err != nil {
		return refuse("%v", err)
	}
	// cur is now the resolved path. Check the nearest existing directory
	// holding it, and the file if it exists.
	dir := filepath.Dir(cur)
	for {
		fi, err := os.Stat(dir)
		if err == nil {
			if err := checkOwned(fi, trusted); err != "" {
				return refuse("its directory %s %s", dir, err)
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) || dir == "/" {
			return fmt.Errorf("check store path %s: %w", path, err)
		}
		dir = filepath.Dir(dir)
	}
	if fi, err := os.Stat(cur); err == nil {
		if err := checkOwned(fi, trusted); err != "" {
			return refuse("the file %s", err)
		}
	}
	return nil
}

// checkOwned says what lets another user write fi, or "" when nothing does.
func checkOwned(fi fs.FileInfo, trusted uint32) string {
	if uid := owner(fi); uid != trusted {
		return fmt.Sprintf("is owned by uid %d", uid)
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Sprintf("is writable by its group or others (mode %04o)", perm)
	}
	return ""
}

func owner(fi fs.FileInfo) uint32 { return safepath.Owner(fi) }

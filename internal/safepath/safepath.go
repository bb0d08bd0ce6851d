// Package safepath walks a path as the kernel would, for a root that is about
// to read or write there, and says where another user could redirect it.
package safepath

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// maxSymlinks is the kernel's own limit on links followed in one lookup.
const maxSymlinks = 40

// Resolve returns path with every symbolic link followed as the kernel would,
// refusing a link owned by anyone but trusted or root. Otherwise user
// nobody's link out -> /etc would turn root's `bundle -o out/passwd` into a
// write in /etc. Parts of the path that do not exist yet are kept as they
// are.
func Resolve(path string, trusted uint32) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	todo := strings.Split(strings.TrimPrefix(abs, "/"), "/")
	cur := "/"
	links := 0
	for len(todo) > 0 {
		name := todo[0]
		todo = todo[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, name)
		fi, err := os.Lstat(next)
		if errors.Is(err, fs.ErrNotExist) {
			return filepath.Join(append([]string{next}, todo...)...), nil
		}
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if uid := Owner(fi); uid != trusted && uid != 0 {
			return "", fmt.Errorf("%s is a symlink owned by uid %d", next, uid)
		}
		if links++; links > maxSymlinks {
			return "", errors.New("too many symbolic links")
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(target) {
			cur = "/"
		}
		todo = append(strings.Split(target, "/"), todo...)
	}
	return cur, nil
}

// CheckAncestors refuses a resolved path that another user could move away
// and replace. That is a path below an existing directory owned by a user
// other than trusted or root, or writable by its group or others, unless
// sticky (as /tmp is) with the entry below it owned by trusted or root.
func CheckAncestors(resolved string, trusted uint32) error {
	parts := strings.Split(strings.TrimPrefix(filepath.Clean(resolved), "/"), "/")
	dir := "/"
	for _, name := range parts[:len(parts)-1] {
		fi, err := os.Stat(dir)
		if err != nil {
			return err
		}
		next := filepath.Join(dir, name)
		if uid := Owner(fi); uid != trusted && uid != 0 {
			return fmt.Errorf("%s is owned by uid %d, who could move %s away", dir, uid, next)
		}
		if fi.Mode().Perm()&0o022 != 0 {
			sub, err := os.Lstat(next)
			if errors.Is(err, fs.ErrNotExist) {
				return nil // the rest is to be made, by trusted
			}
			if err != nil {
				return err
			}
			if fi.Mode()&fs.ModeSticky == 0 {
				return fmt.Errorf("%s is writable by its group or others (mode %04o): %s could be moved away", dir, fi.Mode().Perm(), next)
			}
			if uid := Owner(sub); uid != trusted && uid != 0 {
				return fmt.Errorf("%s in sticky %s is owned by uid %d", next, dir, uid)
			}
		}
		if _, err := os.Stat(next); errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		dir = next
	}
	return nil
}

// Owner is the uid owning fi.
func Owner(fi fs.FileInfo) uint32 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Uid
	}
	return ^uint32(0)
}

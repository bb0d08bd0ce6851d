package bundle

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// CreateFile writes a new file at name through write, safely when run as
// root in a directory others can write: it never writes through a symbolic
// link, even with force, and never over an existing file without force.
// Without force the file is created exclusively (O_EXCL, O_NOFOLLOW); with
// force the content goes to a temporary file in the same directory, which is
// then renamed over name, so a reader sees the old file or the new one. A
// failed write leaves nothing behind.
func CreateFile(name string, perm os.FileMode, force bool, write func(io.Writer) error) error {
	if err := CheckTarget(name, force); err != nil {
		return err
	}
	if force {
		return replaceFile(name, perm, write)
	}
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, perm)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			// Created since the Lstat above, by someone else.
			return fmt.Errorf("%s exists (use --force to replace it)", name)
		}
		return err
	}
	if err := fill(f, write); err != nil {
		os.Remove(name)
		return err
	}
	return nil
}

// CheckTarget says why CreateFile would refuse to write name, if it would:
// a symbolic link, an existing file without force, a missing directory.
// Commands call it before the work that comes ahead of the write (a capture
// that is stored), so that a wrong -o fails before anything was done.
func CheckTarget(name string, force bool) error {
	if fi, err := os.Lstat(name); err == nil {
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			return fmt.Errorf("%s is a symbolic link: refusing to write through it", name)
		case !force:
			return fmt.Errorf("%s exists (use --force to replace it)", name)
		case !fi.Mode().IsRegular():
			return fmt.Errorf("%s exists and is not a regular file: refusing to replace it", name)
		}
		return nil
	}
	dir := filepath.Dir(name)
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s: directory %s does not exist", name, dir)
	case err != nil:
		return err
	case !fi.IsDir():
		return fmt.Errorf("%s: %s is not a directory", name, dir)
	}
	return nil
}

// replaceFile writes a temporary file beside name and renames it over name;
// rename replaces a link itself, never its target.
func replaceFile(name string, perm os.FileMode, write func(io.Writer) error) error {
	dir, base := filepath.Split(name)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".*.tmp") // O_EXCL, 0600
	if err != nil {
		return err
	}
	tmp := f.Name()
	err = f.Chmod(perm)
	if err == nil {
		err = fill(f, write)
	} else {
		f.Close()
	}
	if err == nil {
		if fi, lerr := os.Lstat(name); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
			err = fmt.Errorf("%s is a symbolic link: refusing to replace it", name)
		}
	}
	if err == nil {
		err = os.Rename(tmp, name)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync() // make the rename durable; a directory that cannot sync is no error
		d.Close()
	}
	return nil
}

// fill writes, syncs and closes f.
func fill(f *os.File, write func(io.Writer) error) error {
	err := write(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// WriteFile writes the bundle of in to the file name (see CreateFile).
func WriteFile(name string, in Input, force bool) (*Manifest, error) {
	var m *Manifest
	err := CreateFile(name, 0o600, force, func(w io.Writer) error {
		var err error
		m, err = Write(w, in)
		return err
	})
	return m, err
}

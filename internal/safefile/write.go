package safefile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/gpusnap/gpusnap/internal/safepath"
)

// Create writes a new file at name through write, safely for root in a
// directory others can write. It never writes through a link at name, nor as
// root through another user's on the way, and replaces a file only with
// force. The synced content is linked or renamed to name whole, so a killed
// write leaves no partial file.
func Create(ctx context.Context, name string, perm os.FileMode, force bool, write func(io.Writer) error) error {
	if err := CheckTarget(name, force); err != nil {
		return err
	}
	dir, base := filepath.Split(name)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".*.tmp") // O_EXCL, 0600
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after a link the name stays, and after a rename nothing is left
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if err := fill(ctx, f, write); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err // interrupted after the last chunk, with still nothing published
	}
	if fi, err := os.Lstat(name); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		return fmt.Errorf("%s is a symbolic link: refusing to replace it", name)
	}
	if force {
		err = os.Rename(tmp, name) // rename replaces a link itself, never its target
	} else if err = os.Link(tmp, name); errors.Is(err, fs.ErrExist) {
		err = fmt.Errorf("%s exists (use --force to replace it)", name) // created since the check, by someone else
	}
	if err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync() // make the new name durable (a directory that cannot sync is no error)
		d.Close()
	}
	return nil
}

// CheckTarget says why Create would refuse to write name, such as a symbolic
// link, an existing file without force, a missing directory, or as root another user's
// link on the way. Commands call it before the work ahead of the write, so a
// wrong -o fails before anything is done.
func CheckTarget(name string, force bool) error {
	if uid := os.Geteuid(); uid == 0 {
		if _, err := safepath.Resolve(filepath.Dir(name), uint32(uid)); err != nil {
			return fmt.Errorf("%s: refusing to write through %v", name, err)
		}
	}
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

// fill writes, syncs and closes f.
func fill(ctx context.Context, f *os.File, write func(io.Writer) error) error {
	err := write(interruptible{ctx, f})
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// interruptible fails every write once ctx is done, so that a long write (a
// bundle of many MB to a slow disk) ends at the next chunk after a SIGTERM.
type interruptible struct {
	ctx context.Context
	w   io.Writer
}

func (i interruptible) Write(p []byte) (int, error) {
	if err := i.ctx.Err(); err != nil {
		return 0, err
	}
	return i.w.Write(p)
}

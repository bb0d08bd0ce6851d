// Package scenariodir lays out a diff scenario of fixtures/scenarios in the
// published layout, with before/, after/ and during/ hosts beside
// expected.json, from its compact form. The compact form is a base host
// plus a changes file that says what each side adds, replaces and removes.
// The package writes the compact form of a published scenario too.
//
// A scenario may come from anyone, so nothing here follows a symbolic link,
// writes outside the target directory or reads past the limits below.
package scenariodir

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"regexp"
	"sort"
	"strings"
	"syscall"

	"github.com/gpusnap/gpusnap/internal/safefile"
)

// The limits a scenario is read within, whoever wrote it.
const (
	maxFile      = 4 << 20  // bytes of one file of a host or of the scenario, its changes too
	maxTreeBytes = 64 << 20 // bytes of all the files of one side
	maxEntries   = 20000    // files and links of one side
	maxDepth     = 32       // elements of one path
	maxPathLen   = 1024     // bytes of one path
)

// Modes the published layout holds. The compact form records no mode, so
// a tree with another is refused rather than changed.
const (
	fileMode = 0o644
	dirMode  = 0o755
)

// entry is a file (its bytes) or a symbolic link (its target text).
type entry struct {
	data   []byte
	link   string
	isLink bool
}

func (e entry) equal(o entry) bool {
	return e.isLink == o.isLink && e.link == o.link && string(e.data) == string(o.data)
}

// tree is one host of a scenario, keyed by slash path below its root.
type tree map[string]entry

func (t tree) clone() tree {
	c := make(tree, len(t))
	for k, v := range t {
		c[k] = v
	}
	return c
}

// size is the bytes of the tree's files.
func (t tree) size() int64 {
	var n int64
	for _, e := range t {
		n += int64(len(e.data))
	}
	return n
}

// sortedPaths lists the tree's paths in order.
func (t tree) sortedPaths() []string {
	paths := make([]string, 0, len(t))
	for p := range t {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	return paths
}

// checkShape refuses a tree where one path is a file or link and another
// lies below it, which no directory could hold, and a tree over the limits.
func (t tree) checkShape() error {
	if len(t) > maxEntries {
		return fmt.Errorf("%d entries, at most %d", len(t), maxEntries)
	}
	if n := t.size(); n > maxTreeBytes {
		return fmt.Errorf("%d bytes, at most %d", n, maxTreeBytes)
	}
	for p := range t {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if _, ok := t[d]; ok {
				return fmt.Errorf("%s lies below the file %s", p, d)
			}
		}
	}
	return nil
}

// nameElem is what one element of a path may hold. It keeps every name a
// proc or sys root needs and leaves out those a marker line or a shell
// would read otherwise.
var nameElem = regexp.MustCompile(`^[A-Za-z0-9._:@+,=~-]+$`)

// checkPath refuses a path that is not a plain relative path below its
// root, one element or more, within the length and depth limits.
func checkPath(p string) error {
	if p == "" || len(p) > maxPathLen {
		return fmt.Errorf("path %q: empty or longer than %d bytes", p, maxPathLen)
	}
	elems := strings.Split(p, "/")
	if len(elems) > maxDepth {
		return fmt.Errorf("path %q: deeper than %d", p, maxDepth)
	}
	for _, e := range elems {
		if e == "." || e == ".." || !nameElem.MatchString(e) {
			return fmt.Errorf("path %q: element %q is not a plain name", p, e)
		}
	}
	return nil
}

// openDir opens dir as a root that no path below it can leave, refusing a
// dir that is itself a link.
func openDir(dir string) (*os.Root, error) {
	st, err := os.Lstat(dir)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("%s: not a directory", dir)
	}
	return os.OpenRoot(dir)
}

// readRegular reads the regular file name below root, up to maxFile bytes.
// It opens without following a link and without waiting on a FIFO.
func readRegular(root *os.Root, name string) ([]byte, error) {
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() || st.Mode().Perm() != fileMode {
		return nil, fmt.Errorf("%s: %s, not a regular file of mode %o", name, st.Mode(), fileMode)
	}
	return safefile.ReadOpen(f, maxFile)
}

// readTree reads the host at dir, its regular files and links, within the
// limits. A directory of another mode, an empty one, or anything but a
// file, link or directory is an error, for the compact form could not
// give it back.
func readTree(dir string) (tree, error) {
	root, err := openDir(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	t := tree{}
	var size int64
	err = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != "." {
			if err := checkPath(p); err != nil {
				return err
			}
		}
		if len(t) >= maxEntries || size > maxTreeBytes {
			return fmt.Errorf("more than %d entries or %d bytes", maxEntries, maxTreeBytes)
		}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := root.Readlink(p)
			if err != nil {
				return err
			}
			t[p] = entry{link: target, isLink: true}
		case d.IsDir():
			return checkDir(root, p)
		case d.Type().IsRegular():
			data, err := readRegular(root, p)
			if err != nil {
				return err
			}
			size += int64(len(data))
			t[p] = entry{data: data}
		default:
			return fmt.Errorf("%s: %s is neither a file, a link nor a directory", p, d.Type())
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return t, nil
}

// checkDir refuses a directory of another mode than dirMode, or an empty
// one below the root.
func checkDir(root *os.Root, p string) error {
	st, err := root.Lstat(p)
	if err != nil {
		return err
	}
	if st.Mode().Perm() != dirMode {
		return fmt.Errorf("%s: directory of mode %o, not %o", p, st.Mode().Perm(), dirMode)
	}
	if p == "." {
		return nil
	}
	f, err := root.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.ReadDir(1); errors.Is(err, io.EOF) {
		return fmt.Errorf("%s: an empty directory", p)
	}
	return nil
}

// writeTree writes t below sub of root, its directories dirMode and files
// fileMode whatever the umask. root keeps every write inside it, and a
// file is created new, never written through what is there.
func writeTree(root *os.Root, sub string, t tree) error {
	if err := t.checkShape(); err != nil {
		return fmt.Errorf("%s: %w", sub, err)
	}
	dirs := map[string]bool{".": true}
	for _, p := range t.sortedPaths() {
		name := path.Join(sub, p)
		if err := makeDirs(root, path.Dir(name), dirs); err != nil {
			return err
		}
		if e := t[p]; e.isLink {
			if err := root.Symlink(e.link, name); err != nil {
				return err
			}
		} else if err := writeNew(root, name, e.data); err != nil {
			return err
		}
	}
	return nil
}

// makeDirs makes dir and the directories above it that dirs does not
// hold yet, each dirMode.
func makeDirs(root *os.Root, dir string, dirs map[string]bool) error {
	if dirs[dir] {
		return nil
	}
	if err := makeDirs(root, path.Dir(dir), dirs); err != nil {
		return err
	}
	if err := root.Mkdir(dir, dirMode); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	dirs[dir] = true
	return root.Chmod(dir, dirMode)
}

// writeNew creates the file name, which must not exist, with data.
func writeNew(root *os.Root, name string, data []byte) error {
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fileMode)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(fileMode)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Package provenance says where an executable came from, naming the Debian
// package that installed its path, and whether the file still matches the package's
// own checksum, from the dpkg database alone (no dpkg run, no network).
package provenance

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"syscall"
)

// Package statuses, as a snapshot's package.status names them.
const (
	Verified    = "verified"     // a package owns the path and the file matches its md5sums
	Modified    = "modified"     // a package owns the path and the file does not match
	NotPackaged = "not packaged" // no package owns the path
	Unknown     = "unknown"      // no dpkg database, or the file or its checksum could not be read
)

// DefaultDir is dpkg's administrative directory.
const DefaultDir = "/var/lib/dpkg"

// Bounds on what a database costs to read. Its files are root's, but a
// damaged or planted database must not cost a capture its memory or time.
const (
	maxFiles     = 1 << 16  // .list files looked at
	maxFileBytes = 16 << 20 // one .list or .md5sums file
	maxBytes     = 256 << 20
)

// DB is a dpkg database, read through its info directory only. Nothing in it
// is followed out of that directory (os.Root).
type DB struct {
	info   *os.Root
	lists  []string // the .list files, sorted, listed at the first scan
	listed bool
	stamp  string
	// Notes say what of the database could not be read.
	Notes []string
}

// Open opens the dpkg database in dir. A dir without an info directory is
// no dpkg host, where Open returns nil and no error and every status is
// Unknown. Open reads no file list, so a caller whose owners are all known
// (Stamp) costs the database two stat calls.
func Open(dir string) (*DB, error) {
	root, err := os.OpenRoot(dir + "/info")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("dpkg database: %w", err)
	}
	db := &DB{info: root}
	if info, err := root.Stat("."); err == nil {
		if status, err := os.Lstat(dir + "/status"); err == nil && status.Mode().IsRegular() {
			db.stamp = fileStamp(info) + " " + fileStamp(status)
		}
	}
	return db, nil
}

// fileStamp names a file's version by its inode, size, mtime and ctime. The
// ctime cannot be set back by anyone, so a file rewritten then touched to
// its old mtime still gets a new stamp.
func fileStamp(fi fs.FileInfo) string {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	return fmt.Sprintf("%d:%d:%d:%d:%d", st.Dev, st.Ino, st.Size, st.Mtim.Nano(), st.Ctim.Nano())
}

// Stamp names the database's version by the info directory's and the
// status file's inode, size, mtime and ctime. dpkg rewrites status and renames
// each new .list into place on every install, upgrade and removal, so an
// owner found under one stamp holds while the stamp does. "" means no
// stamp could be read, and nothing found may be kept.
func (db *DB) Stamp() string {
	if db == nil {
		return ""
	}
	return db.stamp
}

// list reads the info directory's names of .list files, once.
func (db *DB) list() {
	if db.listed {
		return
	}
	db.listed = true
	f, err := db.info.Open(".")
	if err != nil {
		db.Notes = append(db.Notes, "dpkg database: "+err.Error())
		return
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		db.Notes = append(db.Notes, "dpkg database: "+err.Error())
		return
	}
	for _, n := range names {
		if strings.HasSuffix(n, ".list") {
			db.lists = append(db.lists, n)
		}
	}
	slices.Sort(db.lists)
	if len(db.lists) > maxFiles {
		db.Notes = append(db.Notes, fmt.Sprintf("dpkg database: %d .list files; those past the first %d were not read", len(db.lists), maxFiles))
		db.lists = db.lists[:maxFiles]
	}
}

// Close releases the database's directory.
func (db *DB) Close() error {
	if db == nil {
		return nil
	}
	return db.info.Close()
}

// read reads one regular file of the info directory, bounded.
func (db *DB) read(name string) ([]byte, error) {
	st, err := db.info.Lstat(name)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file (not read)", name)
	}
	if st.Size() > maxFileBytes {
		return nil, fmt.Errorf("%s: larger than %d MiB (not read)", name, maxFileBytes>>20)
	}
	return db.info.ReadFile(name)
}

// Owners finds the package that owns each of paths, as dpkg -S would, also
// trying a merged /usr's other spelling (/usr/bin/x as /bin/x and back).
// Paths no package lists are absent. complete is false where some .list could
// not be read (Notes say which), since an absent path may then be some
// package's.
func (db *DB) Owners(paths []string) (owners map[string]string, complete bool) {
	owners = map[string]string{}
	if db == nil || len(paths) == 0 {
		return owners, true
	}
	type probe struct{ path, needle string }
	var probes []probe
	wanted := map[string]bool{}
	for _, p := range paths {
		if neverPackaged(p) || wanted[p] {
			continue
		}
		wanted[p] = true
		for _, alias := range aliases(p) {
			probes = append(probes, probe{p, "\n" + alias + "\n"})
		}
	}
	if len(probes) == 0 {
		return owners, true
	}
	notes := len(db.Notes)
	db.list()
	total := 0
	for _, name := range db.lists {
		if len(owners) == len(wanted) {
			break
		}
		data, err := db.read(name)
		if err != nil {
			db.Notes = append(db.Notes, "dpkg database: "+err.Error())
			continue
		}
		if total += len(data); total > maxBytes {
			db.Notes = append(db.Notes, fmt.Sprintf("dpkg database: .list files past %d MiB were not read", maxBytes>>20))
			break
		}
		for _, pr := range probes {
			if _, done := owners[pr.path]; !done && listsPath(data, pr.needle) {
				owners[pr.path] = strings.TrimSuffix(name, ".list")
			}
		}
	}
	return owners, len(db.Notes) == notes
}

// unpackagedDirs hold no file any Debian package installs. /usr/local is
// the administrator's (Debian Policy 9.1.2), and the others are users' and
// scratch space. An exe there is not packaged without reading the
// database, which would cost a read of it at every capture.
var unpackagedDirs = []string{"/usr/local/", "/home/", "/root/", "/tmp/", "/var/tmp/", "/dev/shm/", "/run/user/"}

// neverPackaged reports whether path lies where no package installs files,
// or is no path at all (a memfd's "/memfd:name").
func neverPackaged(path string) bool {
	if strings.HasPrefix(path, "/memfd:") || !strings.HasPrefix(path, "/") {
		return true
	}
	for _, d := range unpackagedDirs {
		if strings.HasPrefix(path, d) {
			return true
		}
	}
	return false
}

// listsPath reports whether a .list file's text has the line that needle
// ("\n/usr/bin/x\n") frames, its first and last line included, without
// copying the text to frame it.
func listsPath(data []byte, needle string) bool {
	line := needle[1 : len(needle)-1]
	return bytes.Contains(data, []byte(needle)) ||
		(bytes.HasPrefix(data, []byte(needle[1:])) || string(data) == line) ||
		bytes.HasSuffix(data, []byte(needle[:len(needle)-1]))
}

// aliases are the names a path may have in a package's file list on a
// merged-/usr host, itself and /bin/x for /usr/bin/x (or the other way).
func aliases(path string) []string {
	for _, dir := range []string{"/bin/", "/sbin/", "/lib/", "/lib64/"} {
		if rest, ok := strings.CutPrefix(path, "/usr"+dir); ok {
			return []string{path, dir + rest}
		}
		if rest, ok := strings.CutPrefix(path, dir); ok {
			return []string{path, "/usr" + dir + rest}
		}
	}
	return []string{path}
}

// Status says whether a file whose MD5 is md5hex (lower-case hex) is pkg's
// own file at path. It is Verified or Modified by pkg's md5sums, or Unknown
// with why where the checksum could not be read. pkg "" is NotPackaged.
func (db *DB) Status(pkg, path, md5hex string) (status, why string) {
	switch {
	case db == nil:
		return Unknown, "no dpkg database"
	case pkg == "":
		return NotPackaged, ""
	case md5hex == "":
		return Unknown, "the file was not hashed"
	}
	data, err := db.read(pkg + ".md5sums")
	if err != nil {
		return Unknown, err.Error()
	}
	for _, alias := range aliases(path) {
		// Each line holds an MD5, two spaces and the path without its leading slash.
		for line := range bytes.Lines(data) {
			sum, name, ok := bytes.Cut(bytes.TrimRight(line, "\n"), []byte("  "))
			if !ok || string(name) != strings.TrimPrefix(alias, "/") {
				continue
			}
			if string(sum) == md5hex {
				return Verified, ""
			}
			return Modified, fmt.Sprintf("md5 %s, %s.md5sums has %s", md5hex, pkg, sum)
		}
	}
	return Unknown, pkg + ".md5sums does not list " + path
}

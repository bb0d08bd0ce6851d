package provenance

import (
	"crypto/md5"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/internal/testwait"
)

func md5hex(s string) string {
	sum := md5.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

// dpkgDir writes a dpkg database of the files given (name -> text) under a
// temporary directory and returns the directory.
func dpkgDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	info := filepath.Join(dir, "info")
	if err := os.Mkdir(info, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(info, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestOwnersAndStatus(t *testing.T) {
	dir := dpkgDir(t, map[string]string{
		"python3.11-minimal:amd64.list":    "/.\n/usr\n/usr/bin\n/usr/bin/python3.11\n",
		"python3.11-minimal:amd64.md5sums": md5hex("python") + "  usr/bin/python3.11\n",
		"coreutils.list":                   "/.\n/bin\n/bin/ls\n/usr/bin/python3.11x\n",
		"coreutils.md5sums":                md5hex("ls") + "  bin/ls\n",
		"broken.list":                      "/usr/bin/broken\n",
		"broken.md5sums":                   "garbage\n",
		// A planted list naming a path no package may install is not believed.
		"local.list": "/usr/local/bin/python3\n/home/alice/bin/solver\n",
	})
	// A .list linked out of the database is never read, however it names paths.
	outside := filepath.Join(t.TempDir(), "planted")
	if err := os.WriteFile(outside, []byte("/usr/bin/evil\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "info", "planted.list")); err != nil {
		t.Fatal(err)
	}
	db, err := Open(dir)
	if err != nil || db == nil {
		t.Fatalf("Open: %v %v", db, err)
	}
	defer db.Close()
	owners, complete := db.Owners([]string{"/usr/bin/python3.11", "/usr/bin/ls", "/tmp/python3.11", "/usr/bin/evil", "/usr/bin/broken",
		"/usr/local/bin/python3", "/home/alice/bin/solver", "/memfd:x"})
	if complete {
		t.Errorf("a scan that could not read planted.list says it is complete")
	}
	want := map[string]string{"/usr/bin/python3.11": "python3.11-minimal:amd64", "/usr/bin/ls": "coreutils", "/usr/bin/broken": "broken"}
	if len(owners) != len(want) {
		t.Errorf("owners %v, want %v", owners, want)
	}
	for p, pkg := range want {
		if owners[p] != pkg {
			t.Errorf("owner of %s: %q, want %q", p, owners[p], pkg)
		}
	}
	if !strings.Contains(strings.Join(db.Notes, "\n"), "planted.list: not a regular file") {
		t.Errorf("notes %q: want the planted link named", db.Notes)
	}
	for _, c := range []struct{ pkg, path, md5, status string }{
		{"python3.11-minimal:amd64", "/usr/bin/python3.11", md5hex("python"), Verified},
		{"python3.11-minimal:amd64", "/usr/bin/python3.11", md5hex("miner"), Modified},
		{"coreutils", "/usr/bin/ls", md5hex("ls"), Verified}, // merged /usr: listed as /bin/ls
		{"", "/tmp/python3.11", md5hex("python"), NotPackaged},
		{"broken", "/usr/bin/broken", md5hex("x"), Unknown},
		{"gone", "/usr/bin/gone", md5hex("x"), Unknown},
		{"coreutils", "/usr/bin/ls", "", Unknown},
	} {
		if got, why := db.Status(c.pkg, c.path, c.md5); got != c.status {
			t.Errorf("Status(%s, %s): %s (%s), want %s", c.pkg, c.path, got, why, c.status)
		}
	}
}

func TestNoDatabase(t *testing.T) {
	db, err := Open(t.TempDir())
	if db != nil || err != nil {
		t.Fatalf("Open of a dir without info/: %v %v, want nil, nil", db, err)
	}
	if got, _ := db.Status("", "/usr/bin/x", md5hex("x")); got != Unknown {
		t.Errorf("no database: %s, want unknown", got)
	}
	if owners, complete := db.Owners([]string{"/usr/bin/x"}); len(owners) != 0 || !complete {
		t.Errorf("no database owns something: %v %v", owners, complete)
	}
	if db.Stamp() != "" {
		t.Errorf("no database has a stamp")
	}
}

// The stamp changes whenever dpkg changes the database (it renames a new
// .list into place and rewrites status), and with it alone: an owner found
// under a stamp may be kept while the stamp holds.
func TestStamp(t *testing.T) {
	dir := dpkgDir(t, map[string]string{"coreutils.list": "/bin/ls\n"})
	stamp := func() string {
		t.Helper()
		db, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		return db.Stamp()
	}
	if s := stamp(); s != "" {
		t.Errorf("a database without its status file: stamp %q, want none", s)
	}
	status := filepath.Join(dir, "status")
	if err := os.WriteFile(status, []byte("Package: coreutils\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	first := stamp()
	if first == "" || stamp() != first {
		t.Fatalf("stamp %q then %q: want one, the same twice", first, stamp())
	}
	// dpkg's install of a package: a new .list renamed into info/.
	tmp := filepath.Join(dir, "info", "gawk.list-new")
	if err := os.WriteFile(tmp, []byte("/usr/bin/gawk\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "info", "gawk.list")); err != nil {
		t.Fatal(err)
	}
	second := stamp()
	if second == first {
		t.Errorf("a .list renamed into the database left the stamp %q", first)
	}
	// status rewritten to the same size, then touched back to its old
	// times: its ctime still moves (past a coarse clock's tick).
	fi, err := os.Stat(status)
	if err != nil {
		t.Fatal(err)
	}
	testwait.ClockPast(t, status)
	if err := os.WriteFile(status, []byte("Package: coreutilz\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(status, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if stamp() == second {
		t.Errorf("status rewritten and touched back: the stamp did not change")
	}
}

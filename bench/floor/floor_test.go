package floor

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

func TestWalkFixture(t *testing.T) {
	root := t.TempDir()
	maps := "55d0c0a00000-55d0c0a01000 r--p 00000000 08:01 1 /usr/bin/sleep\n"
	for _, pid := range []string{"1", "42"} {
		if err := os.MkdirAll(filepath.Join(root, pid, "fd"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, pid, "maps"), []byte(maps), 0o644); err != nil {
			t.Fatal(err)
		}
		for fd := range 3 {
			if err := os.Symlink("/dev/null", filepath.Join(root, pid, "fd", strconv.Itoa(fd))); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Not processes: the walk must skip them.
	if err := os.WriteFile(filepath.Join(root, "stat"), []byte("btime 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "self"), 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := NewWalker().Walk(root)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Counts{Processes: 2, MapsBytes: int64(2 * len(maps)), Links: 6}); c != want {
		t.Errorf("Walk = %+v, want %+v", c, want)
	}
}

func TestWalkLiveProcSeesItself(t *testing.T) {
	c, err := NewWalker().Walk("/proc")
	if err != nil {
		t.Fatal(err)
	}
	// This process has a maps file and at least stdin, stdout, stderr.
	if c.Processes < 1 || c.MapsBytes == 0 || c.Links < 3 {
		t.Errorf("Walk(/proc) = %+v", c)
	}
}

func TestWalkMissingRoot(t *testing.T) {
	if _, err := NewWalker().Walk(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Error("Walk of a missing root: no error")
	}
}

package store

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gpusnap/gpusnap/internal/livetest"
)

// As root, the binary cache goes where the store may go, and nowhere a
// store would be refused: a directory others may write, a cache file
// another user owns.
func TestBinaryCachePath(t *testing.T) {
	livetest.Require(t)
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "gpusnap.db")
	if got := BinaryCachePath(db); got != db+".binaries" {
		t.Errorf("a store's own directory: %q, want %s.binaries", got, db)
	}
	if err := os.WriteFile(db+".binaries", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(db+".binaries", 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if got := BinaryCachePath(db); got != "" {
		t.Errorf("a cache owned by another user: %q, want none", got)
	}
	open := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if got := BinaryCachePath(filepath.Join(open, "gpusnap.db")); got != "" {
		t.Errorf("a world-writable directory: %q, want none", got)
	}
}

package store

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/internal/testenv"
)

func TestRootRefusesPathsOthersCanTamperWith(t *testing.T) {
	testenv.Root(t, "the store path checks apply to root only")
	base := t.TempDir() // 0700, root's
	mk := func(name string, mode os.FileMode, uid int) string {
		dir := filepath.Join(base, name)
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, uid, 0); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	safe := mk("safe", 0o700, 0)
	sub := func(parent, name string, mode os.FileMode, uid int) string {
		dir := filepath.Join(parent, name)
		if err := os.Mkdir(dir, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, uid, 0); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	link := func(name, target string, uid int) string {
		l := filepath.Join(base, name)
		if err := os.Symlink(target, l); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(l, uid, 0); err != nil {
			t.Fatal(err)
		}
		return l
	}
	otherFile := filepath.Join(mk("safe2", 0o755, 0), "gpusnap.db")
	if err := os.WriteFile(otherFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_ = os.Chown(otherFile, 1000, 1000)

	for _, tc := range []struct {
		name, path, refused string // refused: a word of the message, "" when accepted
	}{
		{"safe", filepath.Join(safe, "gpusnap.db"), ""},
		{"not-yet-created", filepath.Join(safe, "a", "b", "gpusnap.db"), ""},
		{"root-symlink", filepath.Join(link("rootlink", safe, 0), "gpusnap.db"), ""},
		{"world-writable", filepath.Join(mk("world", 0o777, 0), "gpusnap.db"), "writable by its group or others"},
		{"sticky-tmp-like", filepath.Join(mk("sticky", 0o1777, 0), "gpusnap.db"), "writable by its group or others"},
		{"group-writable", filepath.Join(mk("group", 0o770, 0), "gpusnap.db"), "writable by its group or others"},
		{"owned-by-other", filepath.Join(mk("other", 0o700, 1000), "gpusnap.db"), "owned by uid 1000"},
		{"under-world-writable", filepath.Join(mk("world2", 0o777, 0), "new", "gpusnap.db"), "writable by its group or others"},
		{"user-symlink", filepath.Join(link("userlink", safe, 1000), "gpusnap.db"), "symlink owned by uid 1000"},
		{"user-symlink-to-file", link("userfile", filepath.Join(safe, "x.db"), 1000), "symlink owned by uid 1000"},
		{"file-of-other", otherFile, "the file is owned by uid 1000"},
		// An ancestor another user can write: the store's own directory is
		// sound, but the one above lets its directory be moved away.
		{"ancestor-world-writable", filepath.Join(sub(mk("open", 0o777, 0), "state", 0o700, 0), "gpusnap.db"), "could be moved away"},
		{"ancestor-of-other", filepath.Join(sub(mk("theirs", 0o755, 1000), "state", 0o700, 0), "gpusnap.db"), "owned by uid 1000, who could move"},
		{"sticky-ancestor", filepath.Join(sub(mk("sticky2", os.ModeSticky|0o777, 0), "state", 0o700, 0), "gpusnap.db"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkPath(tc.path, 0)
			if tc.refused == "" {
				if err != nil {
					t.Fatalf("refused a safe path: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrUnsafePath) || !strings.Contains(err.Error(), tc.refused) || !strings.Contains(err.Error(), "secrets") {
				t.Fatalf("got %v, want a refusal saying %q", err, tc.refused)
			}
			// Open refuses it before creating anything.
			if _, err := Open(tc.path, Options{}); !errors.Is(err, ErrUnsafePath) {
				t.Errorf("Open: %v", err)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(base, "world2", "new")); err == nil {
		t.Error("Open created a directory under a world-writable one")
	}
}

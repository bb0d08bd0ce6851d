package safefile

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/internal/testenv"
)

// TestCreateNothingAtNameUntilWhole: while the content is written, and after
// a write that fails half-way, nothing is at the final name (a SIGTERM or a
// full disk leaves no truncated file there, and a re-run is not refused);
// the temporary file is gone after a failure.
func TestCreateNothingAtNameUntilWhole(t *testing.T) {
	for _, force := range []bool{false, true} {
		dir := t.TempDir()
		name := filepath.Join(dir, "b.tar.gz")
		boom := errors.New("killed")
		err := Create(t.Context(), name, 0o600, force, func(w io.Writer) error {
			w.Write([]byte("half"))
			if _, err := os.Lstat(name); err == nil {
				t.Errorf("force %v: %s exists while it is written", force, name)
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("force %v: %v", force, err)
		}
		if left, _ := os.ReadDir(dir); len(left) != 0 {
			t.Errorf("force %v: left %v", force, left)
		}
		if err := Create(t.Context(), name, 0o600, force, func(w io.Writer) error { _, err := w.Write([]byte("whole")); return err }); err != nil {
			t.Fatalf("force %v: the re-run: %v", force, err)
		}
		if b, _ := os.ReadFile(name); string(b) != "whole" {
			t.Errorf("force %v: %q", force, b)
		}
		if err := Create(t.Context(), name, 0o600, false, func(io.Writer) error { return nil }); err == nil || !strings.Contains(err.Error(), "exists") {
			t.Errorf("force %v: a second write without force: %v", force, err)
		}
	}
}

// TestCreateInterruptedPublishesNothing: once the context is done (gpusnap's
// SIGTERM), the next chunk of the write fails, and neither the file nor the
// temporary file is left.
func TestCreateInterruptedPublishesNothing(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "b.tar.gz")
	ctx, cancel := context.WithCancel(t.Context())
	chunks := 0
	err := Create(ctx, name, 0o600, false, func(w io.Writer) error {
		for ; chunks < 100; chunks++ {
			if chunks == 3 {
				cancel()
			}
			if _, err := w.Write([]byte("chunk")); err != nil {
				return err
			}
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) || chunks != 3 {
		t.Fatalf("err %v after %d chunks; want context.Canceled at chunk 3", err, chunks)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("left %v", left)
	}
}

// TestCreateRefusesForeignDirectoryLink: as root, a directory on the way
// that is a symbolic link owned by another user is not written through.
func TestCreateRefusesForeignDirectoryLink(t *testing.T) {
	testenv.Root(t, "lchown to user nobody")
	dir := t.TempDir()
	target := filepath.Join(dir, "etc")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	if err := os.Symlink(target, out); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(out, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	err := Create(t.Context(), filepath.Join(out, "passwd"), 0o600, false, func(io.Writer) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "symlink owned by uid 65534") {
		t.Fatalf("got %v", err)
	}
	if left, _ := os.ReadDir(target); len(left) != 0 {
		t.Errorf("written through the link: %v", left)
	}
}

package main

import (
	"os"
	"path/filepath"
	"testing"
)

// An unchanged process whose device path holds invalid UTF-8 raises nothing:
// the baseline read back from the store and the fresh capture must agree.
func TestDiffUnchangedHostileDevicePathIsClean(t *testing.T) {
	root := t.TempDir()
	pid := filepath.Join(root, "400")
	for _, f := range []struct{ name, data string }{
		{"stat", "400 (x\xff) S 1 400 400 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 900 0 0\n"},
		{"maps", "7f0000000000-7f0000200000 rw-s 00000000 00:06 77 /tmp/w/dev/nvidia\xff9\n"},
	} {
		if err := os.MkdirAll(filepath.Join(pid, "fd"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pid, f.name), []byte(f.data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/tmp/w/dev/nvidia\xff9", filepath.Join(pid, "fd", "5")); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(t.TempDir(), "s.db")
	common := []string{"--db", db, "--proc-root", root, "--no-nvml"}
	if code, _, stderr := gpusnap(t, append([]string{"baseline", "--tenant", "t"}, common...)...); code != 0 {
		t.Fatalf("baseline: exit %d: %s", code, stderr)
	}
	if code, stdout, stderr := gpusnap(t, append([]string{"diff", "--tenant", "t"}, common...)...); code != 0 {
		t.Fatalf("diff of an unchanged host: exit %d\n%s%s", code, stdout, stderr)
	}
}

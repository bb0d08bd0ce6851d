package livetest

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// SmallTmpfs mounts a tmpfs of size bytes (a multiple of the page size) in a
// temporary directory, unmounted when the test ends, for a disk that really
// fills up.
func SmallTmpfs(t testing.TB, size int) string {
	t.Helper()
	Require(t)
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "size="+strconv.Itoa(size)+",mode=0700"); err != nil {
		t.Skipf("live test: mounting a tmpfs is refused here: %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("livetest: unmount %s: %v", dir, err)
		}
	})
	return dir
}

// FillDisk writes a file in dir until the filesystem refuses more (ENOSPC)
// and returns its path. Removing it frees the disk again.
func FillDisk(t testing.TB, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatalf("livetest: %v", err)
	}
	defer f.Close()
	chunk := make([]byte, 4096)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("livetest: filling %s: %v", dir, err)
			}
			break
		}
	}
	// The last page is written byte by byte, so that no whole page is left free.
	for {
		if _, err := f.Write(chunk[:1]); err != nil {
			break
		}
	}
	return path
}

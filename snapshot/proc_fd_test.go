package snapshot

import (
	"context"
	"os"
	"testing"
)

// TestHoldersManyFds: on the live procfs an fd directory longer than one
// getdents (8 KB of records: about 340 fds) is listed whole. A listing that
// took a short getdents for the end failed here under -race: a pending
// signal stops procfs filling the buffer.
func TestHoldersManyFds(t *testing.T) {
	if !isProcfs("/proc") {
		t.Skip("/proc is not a mounted procfs")
	}
	const extra = 1000
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for range extra {
		f, err := os.Open("/dev/null")
		if err != nil {
			t.Skipf("cannot open %d fds: %v", extra, err)
		}
		files = append(files, f)
	}
	s, err := Capture(context.Background(), Options{NVML: NVMLOptions{Disabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	p := findPID(t, s, os.Getpid())
	want := map[int]bool{}
	for _, f := range files {
		want[int(f.Fd())] = true
	}
	for _, h := range p.Holders {
		delete(want, h.FD)
	}
	if len(want) > 0 {
		t.Errorf("%d of the %d fds open on /dev/null are not among the holders (%d holders)", len(want), extra, len(p.Holders))
	}
}

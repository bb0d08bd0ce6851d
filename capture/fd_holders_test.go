package capture

import (
	"context"
	"os"
	"testing"

	"github.com/gpusnap/gpusnap/internal/testenv"
	"github.com/gpusnap/gpusnap/snapshot"
)

// TestHoldersManyFds: on the live procfs an fd directory longer than one
// getdents (8 KB of records: about 340 fds) is listed whole. A listing that
// took a short getdents for the end failed here under -race: a pending
// signal stops procfs filling the buffer. By both capture paths, every fd
// on /dev/null is a holder or counted in the node's run, and no more than
// MappingsPerDevice are kept one by one (a tenant can hold 500,000).
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
	for _, path := range []string{PathProc, PathBPF} {
		t.Run(path, func(t *testing.T) {
			if path == PathBPF {
				testenv.Root(t, "the BPF capture path loads programs")
			}
			s, err := Capture(context.Background(), Options{Path: path})
			if err != nil || s.Scan.CapturePath != path {
				t.Skipf("capture by %s: %v", path, err)
			}
			p := findPID(t, s, os.Getpid())
			kept, counted := 0, 0
			for _, h := range p.Holders {
				if h.Target == "/dev/null" {
					kept++
				}
			}
			for _, r := range p.HolderRuns {
				if r.Path == "/dev/null" {
					counted += r.Lines
				}
			}
			if kept != snapshot.MappingsPerDevice || kept+counted < extra {
				t.Errorf("%d fds on /dev/null kept and %d counted; want %d kept, and %d or more in all", kept, counted, snapshot.MappingsPerDevice, extra)
			}
		})
	}
}

// TestHolderRunsKeepNewAccess: past a node's first MappingsPerDevice fds,
// one opened for writing among read-only ones is kept; the rest are counted.
func TestHolderRunsKeepNewAccess(t *testing.T) {
	var r holderRuns
	minor := 0
	h := snapshot.Holder{Target: "/dev/nvidia0", DeviceNumber: snapshot.DeviceNumber{Major: 195, Minor: 0}, Class: snapshot.ClassNVIDIA, GPUMinor: &minor, Access: "r"}
	kept := 0
	for i := range 1000 {
		h.FD, h.Access = i, "r"
		if i == 900 {
			h.Access = "rw"
		}
		if r.kept(&h) {
			kept++
			if i >= snapshot.MappingsPerDevice && h.Access != "rw" {
				t.Errorf("fd %d (%s) kept past the first %d", i, h.Access, snapshot.MappingsPerDevice)
			}
		}
	}
	runs := r.runs.Result()
	if kept != snapshot.MappingsPerDevice+1 || len(runs) != 1 || runs[0].Lines != 1000-kept || runs[0].Path != "/dev/nvidia0" {
		t.Errorf("%d kept, runs %+v", kept, runs)
	}
}

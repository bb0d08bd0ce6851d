package capture

import (
	"context"
	"strings"
	"sync"

	"github.com/gpusnap/gpusnap/bpf"
	"github.com/gpusnap/gpusnap/snapshot"
)

// UseWalkPrograms makes the BPF path load the iterators with the first of
// tasks and vmas the kernel takes, never from or to pins, until the returned
// function restores it: the fallback programs of older kernels, tested here.
func UseWalkPrograms(tasks, vmas []string) (restore func()) {
	old := openWalk
	openWalk = func() (*bpf.Walk, error) { return bpf.OpenWalkWith(tasks, vmas) }
	return func() { openWalk = old }
}

// WithoutTriage is opts for a capture that reads no triage evidence (no
// sockets, lineage, hashes or packages): the baseline of a benchmark.
func WithoutTriage(opts Options) Options {
	opts.noCorroborate = true
	return opts
}

// FindPID is findPID for the live tests: the snapshot's record of a PID.
var FindPID = findPID

// CaptureCounting is Capture on the /proc path, also counting the files it
// read whose path ends in suffix.
func CaptureCounting(ctx context.Context, opts Options, suffix string) (*snapshot.Snapshot, int, error) {
	var mu sync.Mutex
	n := 0
	s, err := capture(ctx, opts, func(path string) error {
		if strings.HasSuffix(path, suffix) {
			mu.Lock()
			n++
			mu.Unlock()
		}
		return nil
	})
	return s, n, err
}

// OnFillInRead has fn called where a BPF capture's fill-in that did not
// prove directories has read them all, until the returned function
// restores the hook.
func OnFillInRead(fn func()) (restore func()) {
	old := fillInRead
	fillInRead = fn
	return func() { fillInRead = old }
}

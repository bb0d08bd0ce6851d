package capture

import "github.com/gpusnap/gpusnap/bpf"

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

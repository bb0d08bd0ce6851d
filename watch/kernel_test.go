package watch

import (
	"slices"
	"testing"

	"github.com/gpusnap/gpusnap/bpf"
	"github.com/gpusnap/gpusnap/eventlog"
)

// Every kernel hook says what it cannot see: a hook missing from blindSpots
// would start a watch whose record claims it sees everything.
func TestEveryHookHasBlindSpots(t *testing.T) {
	for _, hook := range bpf.Hooks {
		if !slices.Contains(blindSpots[hook], eventlog.BlindBeforeStart) {
			t.Errorf("hook %s: blind spots %q lack %q", hook, blindSpots[hook], eventlog.BlindBeforeStart)
		}
	}
	if !slices.Contains(blindSpots[bpf.HookKprobe], eventlog.BlindMappingSize) {
		t.Errorf("kprobe on security_mmap_file has no mapping size, its blind spots say %q", blindSpots[bpf.HookKprobe])
	}
}

package snapshot_test

import (
	"testing"

	"github.com/gpusnap/gpusnap/snapshot"
)

// TestUnaccountedDriverOwn: what used shows up to the driver's reserve is
// the driver's own, never unaccounted; a context past it, or one on a GPU
// that reports no reserve, still is.
func TestUnaccountedDriverOwn(t *testing.T) {
	const mib = uint64(1) << 20
	reserve := ptr(540 * mib)
	live := []snapshot.GPUProcessUse{{PID: 10, Types: "C", UsedGPUMemory: ptr(gib), Join: snapshot.JoinPID}}
	gone := []snapshot.GPUProcessUse{{PID: 11, Types: "C", UsedGPUMemory: ptr(2 * gib), Join: snapshot.JoinNone}}
	for _, c := range []struct {
		name string
		mem  snapshot.Memory
		uses []snapshot.GPUProcessUse
		want uint64
	}{
		{"idle, used within the reserve (persistence mode)", snapshot.Memory{Used: 540 * mib, Reserved: reserve}, nil, 0},
		{"idle, v2 figure below the reserve", snapshot.Memory{Used: 0, Reserved: reserve}, nil, 0},
		{"idle, used just past the reserve", snapshot.Memory{Used: 580 * mib, Reserved: reserve}, nil, 40 * mib},
		{"a live process and the reserve", snapshot.Memory{Used: 540*mib + gib, Reserved: reserve}, live, 0},
		{"a zombie context past the reserve", snapshot.Memory{Used: 540*mib + 2*gib, Reserved: reserve}, nil, 2 * gib},
		{"a gone PID's context past the reserve", snapshot.Memory{Used: 540*mib + 2*gib, Reserved: reserve}, gone, 2 * gib},
		{"no reserve reported: all of it counts", snapshot.Memory{Used: 580 * mib}, nil, 580 * mib},
	} {
		got := snapshot.Unaccounted(&c.mem, c.uses)
		if got == nil || *got != c.want {
			t.Errorf("%s: unaccounted %v, want %d", c.name, got, c.want)
		}
		if own := snapshot.DriverOwn(&c.mem); own > c.mem.Used {
			t.Errorf("%s: the driver's own %d exceeds used %d", c.name, own, c.mem.Used)
		}
	}
}

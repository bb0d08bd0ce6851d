package snapshot_test

import (
	"testing"

	"github.com/gpusnap/gpusnap/snapshot"
)

// TestUnaccountedDriverOwn: where used counts the driver's reserve (NVML's
// v1 figure), the reserve is the driver's own, never unaccounted; a context
// past it, any context in a v2 figure, and one on a GPU that reports no
// reserve still are.
func TestUnaccountedDriverOwn(t *testing.T) {
	const mib = uint64(1) << 20
	reserve := ptr(540 * mib)
	live := []snapshot.GPUProcessUse{{PID: 10, Types: "C", UsedGPUMemory: ptr(gib), Join: snapshot.JoinPID}}
	gone := []snapshot.GPUProcessUse{{PID: 11, Types: "C", UsedGPUMemory: ptr(2 * gib), Join: snapshot.JoinNone}}
	// v1 figures: used counts the reserve (total = used + free).
	v1 := func(used uint64) snapshot.Memory {
		return snapshot.Memory{Total: 80 * gib, Used: used, Free: 80*gib - used, Reserved: reserve}
	}
	// v2 figures: used leaves the reserve out (total = reserved + used + free).
	v2 := func(used uint64) snapshot.Memory {
		return snapshot.Memory{Total: 80 * gib, Used: used, Free: 80*gib - *reserve - used, Reserved: reserve}
	}
	for _, c := range []struct {
		name string
		mem  snapshot.Memory
		uses []snapshot.GPUProcessUse
		want uint64
	}{
		{"v1, idle, used within the reserve (persistence mode)", v1(540 * mib), nil, 0},
		{"v1, idle, used just past the reserve", v1(580 * mib), nil, 40 * mib},
		{"v1, a live process and the reserve", v1(540*mib + gib), live, 0},
		{"v1, a zombie context past the reserve", v1(540*mib + 2*gib), nil, 2 * gib},
		{"v1, a gone PID's context past the reserve", v1(540*mib + 2*gib), gone, 2 * gib},
		{"v2, idle", v2(0), nil, 0},
		{"v2, a dead context smaller than the reserve", v2(500 * mib), nil, 500 * mib},
		{"v2, a live process", v2(gib), live, 0},
		{"figures that add up neither way: all of used counts", snapshot.Memory{Total: 80 * gib, Used: 580 * mib, Reserved: reserve}, nil, 580 * mib},
		{"no reserve reported: all of it counts", snapshot.Memory{Total: 80 * gib, Used: 580 * mib, Free: 80*gib - 580*mib}, nil, 580 * mib},
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

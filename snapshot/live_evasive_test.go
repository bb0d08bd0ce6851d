package snapshot_test

// Live tests of tenants that use a device where one look at /proc misses
// it: a file held only as an io_uring's registered file.

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/internal/livetest"
	"github.com/gpusnap/gpusnap/snapshot"
)

// TestLiveRegisteredFile: the node opened read-write, registered with an
// io_uring and closed: /proc/PID/fd shows only the ring. The capture reads
// the ring's fdinfo and keeps the registered file as a holder (slot 0, taken
// as read-write), and says it took it so.
func TestLiveRegisteredFile(t *testing.T) {
	livetest.Require(t, "losetup", "gcc")
	loop := livetest.NewLoop(t)
	p := livetest.HoldRegistered(t, loop.Node)
	fds, err := os.ReadDir("/proc/" + strconv.Itoa(p.PID) + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		if target, _ := os.Readlink("/proc/" + strconv.Itoa(p.PID) + "/fd/" + fd.Name()); target == loop.Node {
			t.Fatalf("the tenant still has fd %s on %s: the test needs the ring to hold it alone", fd.Name(), target)
		}
	}
	snap := capturePath(t, snapshot.PathProc)
	q := mustFind(t, snap, p, "io_uring tenant")
	var got []snapshot.Holder
	for _, h := range q.Holders {
		if h.Target == loop.Node {
			got = append(got, h)
		}
	}
	if len(got) != 1 || got[0].RingSlot == nil || *got[0].RingSlot != 0 || got[0].Class != snapshot.ClassNVIDIA || got[0].Access != "rw" {
		t.Fatalf("holders of %s: %+v, want one NVIDIA holder in ring slot 0, access rw; errors %q", loop.Node, got, q.Errors)
	}
	if !q.UsesNVIDIA() || !strings.Contains(strings.Join(q.Errors, "\n"), "taken as open read-write") {
		t.Errorf("the capture does not say the registered file's access was taken as rw: errors %q", q.Errors)
	}
	if len(q.Unreadable) > 0 {
		t.Errorf("the ring was read, yet the process is unreadable: %q %q", q.Unreadable, q.Errors)
	}
}

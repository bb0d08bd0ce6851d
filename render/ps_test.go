package render

import (
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/snapshot"
)

// ps never ends on a line that reads as an all-clear when some processes
// could not be read.
func TestPsLastLine(t *testing.T) {
	for _, c := range []struct {
		found, unreadable int
		want              string
	}{
		{3, 0, ""},
		{0, 0, "gpusnap: no process that could be read maps or holds an NVIDIA device"},
		{0, 7, "gpusnap: no process that could be read maps or holds an NVIDIA device; 7 of 90 processes could not be read (maps or fds): what they use is unknown"},
		{2, 7, "gpusnap: 7 of 90 processes could not be read (maps or fds): what they use is unknown"},
	} {
		if got := PsLastLine(c.found, snapshot.Scan{ProcessesRead: 90, Unreadable: c.unreadable}); got != c.want {
			t.Errorf("found %d, unreadable %d: %q, want %q", c.found, c.unreadable, got, c.want)
		}
	}
	// A PID hopper past the scan's bounds, or a mount over /proc/PID, fails
	// check and diff: ps says so too, whether or not it found processes.
	scan := snapshot.Scan{ProcessesRead: 90, Unsettled: "12 processes of the last of 8 listings vanished before they were read",
		Hidden: []snapshot.HiddenProcess{{PID: 4242}}}
	if got, want := PsLastLine(0, scan), "gpusnap: no process that could be read maps or holds an NVIDIA device; "+
		"1 hidden from /proc (a mount over /proc/PID): what they use is unknown; "+
		"the scan did not settle, so a process that keeps changing its PID may not have been read: "+
		"12 processes of the last of 8 listings vanished before they were read"; got != want {
		t.Errorf("hopper and hidden process: %q, want %q", got, want)
	}
	if got := PsLastLine(3, snapshot.Scan{Unsettled: "x"}); !strings.HasSuffix(got, "may not have been read: x") {
		t.Errorf("unsettled scan with processes found: %q", got)
	}
}

// TestPsHoldersFold: a real CUDA process holds /dev/nvidia0 through a score
// of fds (seen on an H200); ps folds them, as it folds mappings, and keeps
// a lone fd's number.
func TestPsHoldersFold(t *testing.T) {
	hs := []snapshot.Holder{{FD: 8, Target: "/dev/nvidiactl", Access: "rw"}}
	for fd := 11; fd < 31; fd++ {
		hs = append(hs, snapshot.Holder{FD: fd, Target: "/dev/nvidia0", Access: "rw"})
	}
	hs = append(hs, snapshot.Holder{FD: 40, Target: "/dev/nvidia0", Access: "r"}, snapshot.Holder{FD: 41, Target: "/dev/nvidia0", Access: "r", Deleted: true})
	want := "8:/dev/nvidiactl(rw) /dev/nvidia0(rw) x20 40:/dev/nvidia0(r) 41:/dev/nvidia0 (deleted)(r)"
	if got := psHolders(hs); got != want {
		t.Errorf("psHolders = %q, want %q", got, want)
	}
}

package kmsg_test

import (
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/internal/testenv"
	"github.com/gpusnap/gpusnap/kmsg"
	"github.com/gpusnap/gpusnap/snapshot"
)

// liveLog skips a test that needs to read /dev/kmsg when it cannot.
func liveLog(t *testing.T) snapshot.KernelLogPosition {
	t.Helper()
	testenv.Root(t, "reading /dev/kmsg needs CAP_SYSLOG where kernel.dmesg_restrict is 1")
	pos := kmsg.ReadPosition(kmsg.DefaultPath)
	if pos.Unavailable != "" {
		t.Skipf("/dev/kmsg: %s", pos.Unavailable)
	}
	pos.BootID = kmsg.BootID()
	return pos
}

// The live device: its position is the ring's, and a window of its last
// records reads them all, ending at TO.
func TestLiveDevice(t *testing.T) {
	pos := liveLog(t)
	if pos.Next == 0 || pos.First >= pos.Next || pos.BootID == "" {
		t.Fatalf("position %+v", pos)
	}
	from := pos
	from.Next = max(pos.First, pos.Next-3)
	w := kmsg.ReadWindow("", &from, &pos)
	if len(w.Missing) != 0 || len(w.Records) != int(pos.Next-from.Next) || w.Records[len(w.Records)-1].Seq != pos.Next-1 {
		t.Fatalf("window [%d, %d): %d records, missing %q", from.Next, pos.Next, len(w.Records), w.Missing)
	}
	other := pos
	other.BootID = "00000000-0000-0000-0000-000000000000"
	if w := kmsg.ReadWindow("", &from, &other); !strings.Contains(strings.Join(w.Missing, " "), "rebooted since TO") {
		t.Errorf("a TO of another boot: missing %q", w.Missing)
	}
}

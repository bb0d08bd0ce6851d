package watch

import (
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/snapshot"
)

// TestInheritKeepsWritableMapping: a device user that first opens four
// nodes read-only and read-write (eight uses, the bound) and then maps
// nvidia0 writable passes that mapping on to its child: it is what makes
// the lineage's finding high, and eight opens once pushed it out.
func TestInheritKeepsWritableMapping(t *testing.T) {
	ids := newIdentities(nil)
	root := &eventlog.Process{PID: 1000, StartTime: 50, Comm: "hop"}
	ids.keep(root)
	for _, path := range []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia0", "/dev/nvidia-uvm-tools"} {
		for _, access := range []string{"r", "rw"} {
			ids.used(root.Key(), &eventlog.Event{Kind: eventlog.KindOpen, Process: root, Access: access,
				Device: &eventlog.Device{Path: path, Number: "195:0", Class: snapshot.ClassNVIDIA}})
		}
	}
	ids.used(root.Key(), &eventlog.Event{Kind: eventlog.KindMmap, Process: root, Perms: "rw-s",
		Device: &eventlog.Device{Path: "/dev/nvidia0", Number: "195:0", Class: snapshot.ClassNVIDIA}})
	child := &eventlog.Process{PID: 1001, StartTime: 51, PPID: 1000, Comm: "hop"}
	ids.keep(child)
	_, inherited := ids.inherit(root, child, time.Now(), "test")
	writable := 0
	for _, e := range inherited {
		if e.Perms == "rw-s" && e.Writable() {
			writable++
		}
	}
	if len(inherited) != maxUses || writable != 1 {
		t.Errorf("%d inherit records, %d of a writable mapping: want %d and 1: %+v", len(inherited), writable, maxUses, inherited)
	}
}

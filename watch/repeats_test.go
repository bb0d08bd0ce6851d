package watch

import (
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/capture"
	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/snapshot"
)

// TestLineageHopsCoalesced: a device user maps a node, then its lineage
// hops 20,000 PIDs (each member forks and exits), as the kernel source
// reports them. The log holds a handful of records, not three per hop:
// the root's own, then one fork, one inherit and one exit record counting
// the rest, naming the first and last process of the hops, and each
// record of the lineage carries the root.
func TestLineageHopsCoalesced(t *testing.T) {
	proc, err := capture.OpenProcRoot("/proc")
	if err != nil {
		t.Fatal(err)
	}
	defer proc.Close()
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	j, err := eventlog.OpenJournal(eventlog.JournalDir(db))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	r := &recorder{j: j, metrics: noMetrics{}, stats: Stats{Events: map[string]int{}}, log: io.Discard, repeats: newRepeats()}
	ids := newIdentities(proc)
	at := time.Now()
	root := &eventlog.Process{PID: 1000, StartTime: 50, Comm: "hop"}
	ids.keep(root)
	dev := &eventlog.Device{Path: "/dev/nvidia0", Number: "195:0", Class: snapshot.ClassNVIDIA}
	mmap := eventlog.Event{Time: at, Kind: eventlog.KindMmap, Process: root, Device: dev, Perms: "rw-s"}
	ids.used(root.Key(), &mmap)
	r.emit(mmap)
	const hops = 20000
	parent := root
	for i := range hops {
		at = at.Add(300 * time.Microsecond)
		child := &eventlog.Process{PID: 2000 + i, StartTime: uint64(60 + i), PPID: parent.PID, Comm: "hop"}
		ids.keep(child)
		lineage, inherits := ids.inherit(parent, child, at, "test")
		r.emit(append([]eventlog.Event{{Time: at, Kind: eventlog.KindFork, Process: clone(parent), Child: clone(child), Lineage: lineage}}, inherits...)...)
		code := 0
		r.emit(eventlog.Event{Time: at, Kind: eventlog.KindExit, Process: clone(parent), ExitCode: &code, Lineage: ids.forget(parent)})
		parent = child
	}
	r.flushRepeats()
	if err := r.flush(); err != nil {
		t.Fatal(err)
	}
	res, err := eventlog.ReadEvents(j.Dir(), time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{}
	for _, e := range res.Events {
		t.Logf("%s %s count %d lineage %q first %v", e.Kind, e.Process.Key(), e.Count, e.Lineage, e.First)
		counts[e.Kind] += max(e.Count, 1)
		if e.Kind != eventlog.KindMmap && e.Lineage != root.Key() && !(e.Kind == eventlog.KindExit && e.Process.Key() == root.Key()) {
			t.Errorf("%s record of %s: lineage %q, want %s", e.Kind, e.Process.Key(), e.Lineage, root.Key())
		}
		if e.Kind == eventlog.KindInherit && e.Count > 1 {
			if e.First == nil || e.First.PID != 2001 || e.Process.PID != 2000+hops-1 || e.Device == nil || e.Device.Path != dev.Path || e.Perms != "rw-s" {
				t.Errorf("coalesced inherit record: first %+v, last %+v, device %+v %q", e.First, e.Process, e.Device, e.Perms)
			}
		}
	}
	if len(res.Events) > 8 {
		t.Errorf("%d records for %d hops", len(res.Events), hops)
	}
	if counts[eventlog.KindFork] != hops || counts[eventlog.KindInherit] != hops || counts[eventlog.KindExit] != hops {
		t.Errorf("counted %v, want %d forks, inherits and exits", counts, hops)
	}
}

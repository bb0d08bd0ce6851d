package diff

import (
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/snapshot"
)

// A ghost forked by the tenant keeps its parent's mapping, and the history
// shows which tenant process had it.
func TestInheritedFromTenantProcess(t *testing.T) {
	m := mapping(dev0, "rw-s", 0x7f0000000000, 2<<20, 0x1000, dev0No)
	other := mapping(dev0, "rw-s", 0x7f0000000000, 2<<20, 0x1000, dev0No)
	parent := proc(100, 50, "python3", "/usr/bin/python3.11", m)
	sibling := proc(90, 40, "python3", "/usr/bin/python3.11", other) // older, not the parent
	child := proc(101, 60, "python3", "/usr/bin/python3.11", m, func(p *snapshot.Process) { p.PPID = 100 })
	during := snap("mid", sibling, parent, child)
	ghost := child
	ghost.PPID = 1
	to := snap("b", ghost)
	if !Compare(snap("a"), to, Options{}).WantsHistory() {
		t.Error("a ghost's mapping is not inheritable")
	}
	if Compare(withGPUs(snap("a"), gpu(0)), withGPUs(snap("b"), gpu(gib)), Options{}).WantsHistory() {
		t.Error("zombie memory is inheritable")
	}
	r := Compare(snap("a"), to, Options{ZombieThreshold: DefaultZombieThreshold, History: []*snapshot.Snapshot{during}})
	expect(t, r, "leftover_device_mapping high 101 /dev/nvidia0", "unexpected_gpu_process medium 101")
	f := r.Findings[0]
	if f.InheritedFrom != "100@50 (/usr/bin/python3.11)" {
		t.Errorf("inherited from %q, want the parent 100@50", f.InheritedFrom)
	}
	if ev := f.Evidence[len(f.Evidence)-1]; !strings.Contains(ev, "in snapshot mid tenant process 100@50") {
		t.Errorf("evidence = %q", ev)
	}

	// With the parent gone from the history, the oldest tenant process with the mapping.
	r = Compare(snap("a"), to, Options{History: []*snapshot.Snapshot{snap("mid", sibling, child)}})
	if f := first(t, r); f.InheritedFrom != "90@40 (/usr/bin/python3.11)" {
		t.Errorf("inherited from %q, want 90@40", f.InheritedFrom)
	}

	// A process present at FROM is no tenant process, and another offset is another mapping.
	r = Compare(snap("a", parent), to, Options{History: []*snapshot.Snapshot{snap("mid", parent, child)}})
	if f := first(t, r); f.InheritedFrom != "" {
		t.Errorf("inherited from %q, want none: the parent predates the baseline", f.InheritedFrom)
	}
	moved := proc(100, 50, "python3", "/usr/bin/python3.11", mapping(dev0, "rw-s", 0x7f0000000000, 2<<20, 0x2000, dev0No))
	r = Compare(snap("a"), to, Options{History: []*snapshot.Snapshot{snap("mid", moved)}})
	if f := first(t, r); f.InheritedFrom != "" {
		t.Errorf("inherited from %q, want none: the offsets differ", f.InheritedFrom)
	}
}

// CompareWithHistory reads the history only when a finding may be inherited
// and FROM names a tenant, and then once.
func TestCompareWithHistoryReadsOnlyWhenNeeded(t *testing.T) {
	m := mapping(dev0, "rw-s", 0x7f0000000000, 2<<20, 0x1000, dev0No)
	parent := proc(100, 50, "python3", "/usr/bin/python3.11", m)
	ghost := proc(101, 60, "python3", "/usr/bin/python3.11", m)
	tenant := func(s *snapshot.Snapshot) *snapshot.Snapshot { s.Tenant = "job-1"; return s }
	for _, tc := range []struct {
		name     string
		from, to *snapshot.Snapshot
		reads    int
		from100  bool
	}{
		{"clean", tenant(snap("a")), snap("b"), 0, false},
		{"no tenant", snap("a"), snap("b", ghost), 0, false},
		{"a ghost", tenant(snap("a")), snap("b", ghost), 1, true},
	} {
		reads := 0
		var opts Options
		r, err := CompareWithHistory(tc.from, tc.to, &opts, func() ([]*snapshot.Snapshot, error) {
			reads++
			return []*snapshot.Snapshot{snap("mid", parent)}, nil
		})
		if err != nil || reads != tc.reads || (len(opts.History) > 0) != (reads > 0) {
			t.Errorf("%s: history read %d times (%v), want %d", tc.name, reads, err, tc.reads)
			continue
		}
		if got := len(r.Findings) > 0 && r.Findings[0].InheritedFrom == "100@50 (/usr/bin/python3.11)"; got != tc.from100 {
			t.Errorf("%s: findings %+v", tc.name, r.Findings)
		}
	}
}

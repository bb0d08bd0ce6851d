package session

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/eventlog"
)

// TestStoredCommandsOpenOnceAndSayWhatTheyDid: the store's own commands go
// through the Host, one open each. Remove tells each id as it goes, so an
// error on the second leaves the first removed and told, the third not
// tried. A dry prune opens the store read-only and removes nothing, a sound
// store's check has no Damage, and Events reads a tenant's window.
func TestStoredCommandsOpenOnceAndSayWhatTheyDid(t *testing.T) {
	f := newFixture(t, filepath.Join(t.TempDir(), "gpusnap.db"), "cuda-ghost-keeps-context")
	f.baseline(t, "job-1")
	f.baseline(t, "job-1")
	f.post(t, "job-1")
	var opens []bool // read-only, for each open
	f.host.Trace = &Trace{Opened: func(readOnly bool) { opens = append(opens, readOnly) }}
	once := func(what string, readOnly bool) {
		t.Helper()
		if !slices.Equal(opens, []bool{readOnly}) {
			t.Errorf("%s opened the store %v (read-only each), want once, read-only %v", what, opens, readOnly)
		}
		opens = nil
	}

	metas, err := f.host.List(Filter{Tenant: "job-1"})
	if err != nil || len(metas) != 3 {
		t.Fatalf("list: %v, %d snapshots", err, len(metas))
	}
	once("List", true)
	post, latest, first := metas[0], metas[1], metas[2] // newest first
	if snap, err := f.host.Show(post.ID[:20]); err != nil || snap.ID != post.ID {
		t.Errorf("show by prefix: %v", err)
	}
	once("Show", true)
	if head, procs, err := f.host.StoredJSON(post.ID, func(part, process []byte) []byte { return append(part, process...) }); err != nil || len(head) == 0 || len(procs) == 0 {
		t.Errorf("stored JSON: %v, %d bytes and %d parts", err, len(head), len(procs))
	}
	once("StoredJSON", true)

	removed, err := f.host.Prune(Prune{KeepLast: 1, DryRun: true})
	if err != nil || len(removed) != 1 || removed[0].ID != first.ID {
		t.Errorf("dry prune: %v, %v, want the first baseline alone (the latest is kept)", err, removed)
	}
	once("a dry Prune", true)

	told, err := f.host.Remove([]string{first.ID, latest.ID, post.ID}, false)
	wantIn(t, "removing the tenant's latest baseline", err, "latest baseline")
	if !slices.Equal(told, []string{first.ID}) {
		t.Errorf("told %q, want the first baseline alone", told)
	}
	once("Remove", false)
	if metas, err := f.host.List(Filter{}); err != nil || len(metas) != 2 {
		t.Errorf("after the removal: %v, %d snapshots, want the latest baseline and the post", err, len(metas))
	}
	opens = nil

	c, err := f.host.Check()
	if err != nil || c.Damage != nil || c.Snapshots != 2 {
		t.Errorf("check: %v, damage %v, %d snapshots", err, c.Damage, c.Snapshots)
	}
	once("Check", true)

	base, err := f.host.Show(latest.ID)
	if err != nil {
		t.Fatal(err)
	}
	opens = nil
	if _, err := f.host.Events("job-1", time.Time{}, time.Now()); err == nil {
		t.Error("events read a log no watch made")
	}
	once("Events with no log", true)
	j, err := eventlog.OpenJournal(eventlog.JournalDir(f.host.DB)) // as watch makes it
	if err == nil {
		err = j.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	span, err := f.host.Events("job-1", time.Time{}, time.Now())
	if err != nil || !span.From.Equal(base.Host.CaptureStart) || !span.To.Equal(post.Time) || len(span.Cover.Gaps) != 1 {
		t.Errorf("the tenant's window: %v, %s to %s, gaps %v, want from its latest baseline to its post, one gap", err, span.From, span.To, span.Cover.Gaps)
	}
	once("Events", true)
	f.noWarnings(t)
}

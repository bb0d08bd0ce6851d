package store

import (
	"slices"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/snapshot"
)

// History is the tenant's snapshots between FROM and TO, newest first,
// without post snapshots, other tenants, or anything outside the window;
// LatestPost is the newest post snapshot after the baseline.
func TestHistoryAndLatestPost(t *testing.T) {
	s, _ := openTemp(t)
	t0 := time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC)
	at := func(min int, label, tenant string) *snapshot.Snapshot {
		snap := fakeSnapshot(t0.Add(time.Duration(min)*time.Minute), label, tenant, 2)
		if err := s.Put(snap); err != nil {
			t.Fatal(err)
		}
		return snap
	}
	before := at(-1, snapshot.LabelSnapshot, "job-1") // before the baseline
	base := at(0, snapshot.LabelBaseline, "job-1")
	if post, err := s.LatestPost(base); post != nil || err != nil {
		t.Fatalf("latest post with none: %v, %v", post, err)
	}
	var during []string
	for i := 1; i <= 7; i++ {
		during = append(during, at(i, snapshot.LabelSnapshot, "job-1").ID)
	}
	at(3, snapshot.LabelSnapshot, "job-2")
	post := at(8, snapshot.LabelPost, "job-1")
	later := at(9, snapshot.LabelSnapshot, "job-1")
	last := at(10, snapshot.LabelPost, "job-1")

	got, err := s.History(base, post, 5)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, h := range got {
		ids = append(ids, h.ID)
	}
	want := []string{during[6], during[5], during[4], during[3], during[2]}
	if !slices.Equal(ids, want) {
		t.Errorf("history %v, want the five newest during the job %v (not %s, %s)", ids, want, before.ID, later.ID)
	}
	if p, err := s.LatestPost(base); err != nil || p == nil || p.ID != last.ID {
		t.Errorf("latest post: %v, %v; want %s", p, err, last.ID)
	}
}

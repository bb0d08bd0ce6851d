package store

import (
	"github.com/gpusnap/gpusnap/snapshot"
)

// History loads the tenant's newest snapshots taken after from and before
// to, while it ran, at most limit of them, newest first. Post snapshots are
// left out, since taken after a tenant ended they hold only what it left
// behind, not where that came from. It is diff.CompareWithHistory's history.
func (s *Store) History(from, to *snapshot.Snapshot, limit int) ([]*snapshot.Snapshot, error) {
	metas, err := s.List(Filter{Tenant: from.Tenant, Since: from.Host.CaptureStart})
	if err != nil {
		return nil, err
	}
	var out []*snapshot.Snapshot
	for _, m := range metas { // newest first
		if len(out) == limit {
			break
		}
		if m.ID == from.ID || m.ID == to.ID || m.Label == snapshot.LabelPost || !m.Time.Before(to.Host.CaptureStart) {
			continue
		}
		snap, err := s.Get(m.ID)
		if err != nil {
			return nil, err
		}
		out = append(out, snap)
	}
	return out, nil
}

// LatestPost loads the newest post snapshot of baseline's tenant taken after
// baseline (the one `gpusnap diff --tenant` stored), or nil when there is none.
func (s *Store) LatestPost(baseline *snapshot.Snapshot) (*snapshot.Snapshot, error) {
	posts, err := s.List(Filter{Tenant: baseline.Tenant, Label: snapshot.LabelPost, Since: baseline.Host.CaptureStart})
	if err != nil || len(posts) == 0 { // newest first
		return nil, err
	}
	return s.Get(posts[0].ID)
}

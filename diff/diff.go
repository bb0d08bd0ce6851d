package diff

import "github.com/gpusnap/gpusnap/snapshot"

// Options tune a diff.
type Options struct {
	ZombieThreshold uint64 // bytes; --zombie-threshold, default 64 MiB
	MapsDiff        bool   // fill Result.MapsDiffs
	// History holds earlier stored snapshots (of the tenant), to tell which
	// tenant process a surviving mapping was inherited from.
	History []*snapshot.Snapshot
}

// Compare reports what to holds that from did not.
// TODO(diff issue): the rules.
func Compare(from, to *snapshot.Snapshot, opts Options) *Result {
	return &Result{From: from.ID, To: to.ID, Tenant: to.Tenant, Findings: []Finding{}}
}

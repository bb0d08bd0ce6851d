package diff

import (
	"cmp"
	"fmt"

	"github.com/gpusnap/gpusnap/snapshot"
)

// sharedAtFrom reports every use of the GPUs FROM gave its tenant, at FROM,
// by a process not the tenant's, as the gpu_in_use a check at FROM raises.
// The tenant never had them to itself. The leftover rules count only what
// was gained since FROM, and miss a process that holds a GPU at both ends.
func sharedAtFrom(c *comparison) []Finding {
	alloc, tenant := c.from.Allocation, c.from.Tenant
	if alloc == nil || c.check || len(alloc.Minors)+len(alloc.UUIDs) == 0 {
		return nil
	}
	atFrom := newComparison(nothingAllowed(c.from), c.from, Options{}, true)
	members := tenantMembers(tenant, append([]*snapshot.Snapshot{c.from, c.to}, c.opts.History...)...)
	given := fmt.Sprintf("GPUs %s given to tenant %s at FROM (%s)", alloc.String(), cmp.Or(tenant, "?"), cmp.Or(c.from.ID, "baseline"))
	var out []Finding
	for _, f := range gpusInUse(atFrom, resolveGPUs(*alloc, c.fromNVML, c.toNVML)) {
		if _, own := members[f.Process.Key()]; own {
			continue
		}
		alive := "gone at TO"
		if c.toByKey[idOf(f.Process.PID, f.Process.StartTime)] != nil {
			alive = "alive at TO"
		}
		f.Summary = fmt.Sprintf("%s at FROM, when the GPU was given to tenant %s: the tenant never had it to itself (%s)", f.Summary, cmp.Or(tenant, "?"), alive)
		f.Evidence = append([]string{given}, f.Evidence...)
		out = append(out, f)
	}
	return out
}

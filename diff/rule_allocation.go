package diff

import (
	"fmt"
	"time"

	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/snapshot"
)

// KindOutOfAllocation means the tenant used a GPU the scheduler did not give it.
const KindOutOfAllocation = "out_of_allocation_gpu_use"

var _ = register(&Rule{
	Kind: KindOutOfAllocation, Title: "GPU use outside the allocation",
	Severities: []Severity{High},
	GPUUse:     true,
	compare:    []func(*comparison) []Finding{outOfAllocation},
	Order:      150,
})

// outOfAllocation reports a process of FROM's tenant (by its or an
// ancestor's cgroup) that holds, maps or is listed on a GPU outside FROM's
// Allocation, or works on another vendor's accelerator outside it, at TO or
// in the tenant's History, or opens or maps its node in the window's event
// log. nvidiactl and nvidia-uvm count for no GPU.
func outOfAllocation(c *comparison) []Finding {
	alloc, tenant := c.from.Allocation, c.from.Tenant
	if alloc == nil || tenant == "" {
		return nil
	}
	snaps := append([]*snapshot.Snapshot{c.to}, c.opts.History...)
	members := tenantMembers(tenant, snaps...)
	gpus := resolveGPUs(*alloc, c.toNVML, c.fromNVML)
	for _, u := range gpus.unresolved {
		c.notes = append(c.notes, "allocation of "+tenant+" names "+u+", which NVML did not show: device nodes are not matched against it")
	}
	accel := c.accelAllocation(*alloc, gpus, tenant)
	allocText := alloc.String()
	if allocText == "" {
		allocText = "no GPU"
	}
	var out []Finding
	seen := make(map[string]bool) // PID@START + GPU, once per process and GPU
	for _, s := range snaps {
		nv, ax := c.toNVML, c.toAccel
		if s != c.to {
			nv, ax = indexNVML(&s.NVML, s.Processes), indexAccel(s.Accelerators)
		}
		for i := range s.Processes {
			p := &s.Processes[i]
			why, member := members[p.Key()]
			if !member || p.Defunct() {
				continue
			}
			base := []string{"allocation of " + tenant + ": " + allocText, "tenant: " + why}
			where := ""
			if s != c.to {
				where = " in snapshot " + s.ID + ", taken while it ran"
			}
			for _, u := range deviceUses(p, nil) {
				if !u.nvidia() || u.gpuMinor == nil || gpus.minors[*u.gpuMinor] {
					continue
				}
				key := fmt.Sprintf("%s/%d", p.Key(), *u.gpuMinor)
				if seen[key] {
					continue
				}
				seen[key] = true
				uuid := c.gpuUUID(u.gpuMinor)
				out = append(out, c.allocationFinding(p, u.device, uuid,
					fmt.Sprintf("uses %s (%s)%s, outside the allocation of %s (%s)", u.device, gpuName(u.gpuMinor, uuid), where, tenant, allocText),
					append(base, append(mappingEvidence(u.mappings), holderEvidence(u.holders)...)...)))
			}
			if accel && ax != nil {
				out = append(out, c.accelOutside(p, ax, gpus, fmt.Sprintf("%s, outside the allocation of %s (%s)", where, tenant, allocText), base, seen)...)
			}
			for _, e := range nv.byPID[p.PID] {
				if gpus.hasPool(e.pool) {
					continue
				}
				key := p.Key() + "/" + e.pool.id
				if e.pool.minor != nil {
					key = fmt.Sprintf("%s/%d", p.Key(), *e.pool.minor)
				}
				if seen[key] {
					continue
				}
				seen[key] = true
				out = append(out, c.allocationFinding(p, "", e.pool.uuid,
					fmt.Sprintf("is listed by NVML on %s%s, outside the allocation of %s (%s)", e.pool.label, where, tenant, allocText),
					append(base, entryEvidence(e))))
			}
		}
	}
	return append(out, c.outOfAllocationEvents(members, gpus, allocText, seen)...)
}

// outOfAllocationEvents reports the window's opens and mappings, in the event
// log, of a GPU outside the allocation by a process of the tenant that no
// snapshot rule reported already (seen).
func (c *comparison) outOfAllocationEvents(members map[string]string, gpus *gpuSet, allocText string, seen map[string]bool) []Finding {
	if c.opts.Events == nil {
		return nil
	}
	tenant := c.from.Tenant
	end := c.windowEnd()
	var out []Finding
	c.eachEvent(func(e *eventlog.Event) {
		if (e.Kind != eventlog.KindOpen && e.Kind != eventlog.KindMmap) || e.Process == nil || e.Device == nil ||
			e.Device.Class != snapshot.ClassNVIDIA || e.Device.GPU == nil || gpus.minors[*e.Device.GPU] {
			return
		}
		if e.Time.Before(c.from.Host.CaptureStart) || !e.Time.Before(end) {
			return
		}
		p := e.Process
		why := cgroupTenancy(p.VerifiedOwner(snapshot.OwnerSlurmJob), p.VerifiedOwner(snapshot.OwnerPod),
			p.VerifiedOwner(snapshot.OwnerContainer), tenant)
		if why == "" {
			why = members[p.Key()]
		}
		key := fmt.Sprintf("%s/%d", p.Key(), *e.Device.GPU)
		if why == "" || seen[key] {
			return
		}
		seen[key] = true
		minor := e.Device.GPU
		uuid := c.gpuUUID(minor)
		ref := eventProcessRef(p)
		out = append(out, Finding{
			Kind:     KindOutOfAllocation,
			Severity: High,
			Summary: describe(ref) + fmt.Sprintf(" %s %s (%s) at %s (event log), outside the allocation of %s (%s)",
				map[string]string{eventlog.KindOpen: "opened", eventlog.KindMmap: "mapped"}[e.Kind],
				e.Device.Path, gpuName(minor, uuid), e.Time.UTC().Format(time.RFC3339), tenant, allocText),
			Process:  ref,
			Device:   e.Device.Path,
			GPUUUID:  uuid,
			Evidence: []string{"allocation of " + tenant + ": " + allocText, "tenant: " + why, eventEvidence(e)},
		})
	})
	return out
}

func (c *comparison) allocationFinding(p *snapshot.Process, device, uuid, what string, evidence []string) Finding {
	ref := processRef(p)
	return Finding{
		Kind:     KindOutOfAllocation,
		Severity: High,
		Summary:  describe(ref) + " " + what,
		Process:  ref,
		Device:   device,
		GPUUUID:  uuid,
		Evidence: evidence,
	}
}

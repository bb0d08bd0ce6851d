package diff

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/snapshot"
)

// KindGPUInUse means a process holds, maps or is listed on a GPU being handed
// out (check), or was on one FROM gave its tenant (diff), and is neither
// allowed nor the tenant's.
const KindGPUInUse = "gpu_in_use"

var _ = register(&Rule{
	Kind: KindGPUInUse, Title: "GPU in use before it is handed out",
	Severities: []Severity{Low, High},
	compare:    []func(*comparison) []Finding{sharedAtFrom},
	check:      gpusInUse,
	Order:      190,
})

// CheckOptions tune a check.
type CheckOptions struct {
	// GPUs are the GPUs to check (--gpus). Nil checks every GPU and every
	// NVIDIA device.
	GPUs            *snapshot.GPUSet
	ZombieThreshold uint64 // bytes, set by --zombie-threshold
	Allow           *AllowList
	// FailOn is what makes the GPUs not clean (--fail-on).
	FailOn FailOn
	// Events is what gpusnap watch recorded from Since to the capture, and
	// ExpectWatch and LogProblems are as a diff's Options have them. A
	// process alive now that the log shows open a GPU checked, and that the
	// capture sees hold none, is hidden_device_use. A GPU its last samples
	// show busy with no process is gpu_busy_without_process.
	Events      eventlog.Source
	Since       time.Time
	ExpectWatch bool
	LogProblems []eventlog.Problem
}

// CheckScope is what a check looked at, and what it could not see.
type CheckScope struct {
	GPUs string `json:"gpus"` // the list checked, or "all"
	// Unchecked names each GPU asked for that could not be read. The
	// result is then not clean, whatever the findings say.
	Unchecked []string `json:"unchecked,omitempty"`
	// Verdict is the answer, VerdictClean, VerdictNotClean (a finding at or
	// above FailOn) or VerdictUnknown (none, but a GPU asked for unchecked).
	Verdict string `json:"verdict"`
}

// GPUUnchecked says why the GPU of minor n (-1 where not known), or of
// uuid, could not be checked, or "" where it was or s is nil. It reads the
// lines unchecked writes.
func (s *CheckScope) GPUUnchecked(n int, uuid string) string {
	if s == nil {
		return ""
	}
	for _, u := range s.Unchecked {
		byMinor := n >= 0 && (strings.HasPrefix(u, fmt.Sprintf("GPU %d: ", n)) || strings.HasPrefix(u, fmt.Sprintf("GPU %d (", n)))
		if byMinor || strings.HasPrefix(u, "every GPU: ") || (uuid != "" && strings.HasPrefix(u, uuid+": ")) {
			return u
		}
	}
	return ""
}

// A check's verdicts, as its text and its exit status (0, 1, 2) give them.
const (
	VerdictClean    = "clean"
	VerdictNotClean = "not clean"
	VerdictUnknown  = "not known to be clean"
)

// Check is the gate before GPUs are handed out. It compares the host now
// against one where nothing is allowed, with no process and no memory on any
// GPU. On the GPUs checked, a process that holds, maps or is listed on one is
// gpu_in_use unless allowed, and memory above the threshold that no live
// process accounts for is zombie_gpu_memory.
func Check(to *snapshot.Snapshot, opts CheckOptions) *Result {
	c := newComparison(nothingAllowed(to), to, Options{ZombieThreshold: opts.ZombieThreshold, Allow: opts.Allow,
		Events: opts.Events, ExpectWatch: opts.ExpectWatch, LogProblems: opts.LogProblems}, true)
	if !opts.Since.IsZero() {
		c.since = opts.Since
	}
	gpus, scope := allGPUs, &CheckScope{GPUs: "all"}
	if opts.GPUs != nil {
		gpus = resolveGPUs(*opts.GPUs, c.toNVML)
		gpus.resolveAccel(*opts.GPUs, c.toAccel)
		scope.GPUs = opts.GPUs.String()
		scope.Unchecked = c.unchecked(gpus, *opts.GPUs)
	} else {
		scope.Unchecked = c.noGPUSeen()
	}
	var findings []Finding
	for _, rule := range registry {
		if rule.check != nil {
			findings = append(findings, rule.check(c, gpus)...)
		}
	}
	c.applyAllow(findings)
	c.attachTriage(findings)
	c.attachShapes(findings)
	sortFindings(findings)
	if findings == nil {
		findings = []Finding{}
	}
	r := &Result{
		Utilization: c.utilizationResult(),
		To:          to.ID,
		ToTime:      to.Host.CaptureStart,
		Tenant:      to.Tenant,
		Findings:    findings,
		Summary:     summarize(findings),
		Notes:       c.notes,
		Check:       scope,
	}
	switch {
	case r.FailedOn(opts.FailOn):
		scope.Verdict = VerdictNotClean
	case len(scope.Unchecked) > 0:
		scope.Verdict = VerdictUnknown
	default:
		scope.Verdict = VerdictClean
	}
	return r
}

// CheckBaseline is the host a check compares to, which is its FROM in an
// evidence bundle of the check.
func CheckBaseline(to *snapshot.Snapshot) *snapshot.Snapshot { return nothingAllowed(to) }

// nothingAllowed is the host a check compares against, the same host and
// GPUs with no process and no GPU memory in use.
func nothingAllowed(to *snapshot.Snapshot) *snapshot.Snapshot {
	from := &snapshot.Snapshot{Host: to.Host, NVML: to.NVML}
	from.NVML.Devices = make([]snapshot.GPU, len(to.NVML.Devices))
	for i, g := range to.NVML.Devices {
		empty := snapshot.GPU{Index: g.Index, UUID: g.UUID, Name: g.Name, MinorNumber: g.MinorNumber, PCIBusID: g.PCIBusID, MIGMode: g.MIGMode}
		if g.Memory != nil {
			empty.Memory = &snapshot.Memory{Total: g.Memory.Total}
		}
		for _, m := range g.MIGDevices {
			em := snapshot.MIGDevice{GPUInstanceID: m.GPUInstanceID, ComputeInstanceID: m.ComputeInstanceID, UUID: m.UUID}
			if m.Memory != nil {
				em.Memory = &snapshot.Memory{Total: m.Memory.Total}
			}
			empty.MIGDevices = append(empty.MIGDevices, em)
		}
		from.NVML.Devices[i] = empty
	}
	return from
}

// unchecked lists the GPUs asked for that the check could not read. NVML
// unread leaves a GPU's memory unseen, which is a note, as for a diff, unless
// the GPU was named by UUID, which only NVML links to a device node.
func (c *comparison) unchecked(gpus *gpuSet, asked snapshot.GPUSet) []string {
	var out []string
	for _, u := range gpus.unresolved {
		why := "NVML does not show it"
		if c.toNVML.unavailable != "" {
			why = "NVML was not read (" + c.toNVML.unavailable + ")"
		}
		out = append(out, u+": "+why+", so no device node can be matched to it")
	}
	for _, id := range gpus.accelUnresolved {
		out = append(out, id+": "+c.accelUnseen())
	}
	if c.toNVML.unavailable != "" {
		for _, n := range asked.Minors {
			if !c.nodeSeen(n) {
				out = append(out, fmt.Sprintf("GPU %d: no device node of it was seen and NVML was not read (%s)", n, c.toNVML.unavailable))
			}
		}
		return out
	}
	for _, n := range asked.Minors {
		g := c.toNVML.gpuByMinor[n]
		switch {
		case g == nil:
			out = append(out, fmt.Sprintf("GPU %d: NVML does not show it", n))
		case g.Memory == nil:
			out = append(out, fmt.Sprintf("GPU %d (%s): NVML gave no memory figure", n, g.UUID))
		}
	}
	return out
}

// accelUnseen says why an accelerator ID names no device.
func (c *comparison) accelUnseen() string {
	if c.toAccel == nil {
		return "no accelerator but NVIDIA's was read from the sys root"
	}
	return "no accelerator read from " + c.toAccel.a.SysRoot + " has this ID"
}

// noGPUSeen is what a check of every GPU could not check where NVML was
// not read and no GPU was seen. That is nothing on a host whose
// /proc/devices shows the NVIDIA driver not loaded, since no GPU can be used
// there and a note says so. Else it is every GPU, as the driver may hold
// GPUs that nothing showed.
func (c *comparison) noGPUSeen() []string {
	why := c.toNVML.unavailable
	if why == "" || len(c.to.Host.GPUNodes) > 0 || c.anyNVIDIADeviceUsed() {
		return nil
	}
	switch c.to.Host.NVIDIADriver {
	case snapshot.DriverNotLoaded:
		c.notes = append(c.notes, "no GPU on this host: NVML was not read ("+why+"), no NVIDIA device node or use was seen, and /proc/devices shows the NVIDIA driver not loaded")
		return nil
	case snapshot.DriverLoaded:
		return []string{"every GPU: none was seen (no device node, no process using one) and NVML was not read (" + why + "), though the NVIDIA driver is loaded"}
	}
	return []string{"every GPU: none was seen (no device node, no process using one), NVML was not read (" + why + ") and whether the NVIDIA driver is loaded is not known (/proc/devices was not read)"}
}

// anyNVIDIADeviceUsed reports whether a process holds or maps an NVIDIA
// device.
func (c *comparison) anyNVIDIADeviceUsed() bool {
	for _, ch := range c.deviceUsers {
		for _, u := range ch.uses {
			if u.nvidia() {
				return true
			}
		}
	}
	return false
}

// nodeSeen reports whether the capture saw GPU minor's device node without
// NVML, where the host showed it or a process holds or maps it. A GPU that nothing
// shows was not looked at, so it is never clean.
func (c *comparison) nodeSeen(minor int) bool {
	if slices.Contains(c.to.Host.GPUNodes, minor) {
		return true
	}
	for _, ch := range c.deviceUsers {
		for _, u := range ch.uses {
			if u.nvidia() && u.gpuMinor != nil && *u.gpuMinor == minor {
				return true
			}
		}
	}
	return false
}

// gpusInUse reports every live process that holds, maps or is listed on a
// GPU of the set, once per process and device (or GPU, for an NVML listing
// with no device node of that GPU seen).
func gpusInUse(c *comparison, gpus *gpuSet) []Finding {
	var out []Finding
	seenGPU := make(map[string]bool) // PID@START + minor of a node use already reported
	for _, ch := range c.deviceUsers {
		if ch.proc.Defunct() {
			continue
		}
		for _, u := range ch.uses {
			if !gpus.hasDevice(u) {
				continue
			}
			var verbs, counts []string
			if len(u.holders) > 0 {
				verbs, counts = append(verbs, "holds"), append(counts, count(len(u.holders), "descriptor"))
			}
			if len(u.mappings) > 0 {
				verbs, counts = append(verbs, "maps"), append(counts, count(len(u.mappings), "mapping"))
			}
			ref := processRef(ch.proc)
			uuid := c.gpuUUID(u.gpuMinor)
			if u.gpuMinor != nil {
				seenGPU[ch.proc.Key()+"/"+fmt.Sprint(*u.gpuMinor)] = true
			}
			sev, on := High, gpuName(u.gpuMinor, uuid)
			if !u.nvidia() {
				sev, on = c.accelInUse(u)
			}
			out = append(out, Finding{
				Kind:     KindGPUInUse,
				Severity: sev,
				Summary: fmt.Sprintf("%s %s %s (%s; %s)", describe(ref), strings.Join(verbs, " and "), u.device,
					on, strings.Join(counts, ", ")),
				Process:  ref,
				Device:   u.device,
				GPUUUID:  uuid,
				Evidence: append(append(mappingEvidence(u.mappings), holderEvidence(u.holders)...), c.accelEvidence(ch.proc, u)...),
			})
		}
	}
	for i := range c.to.Processes {
		p := &c.to.Processes[i]
		if p.Defunct() || c.staleEntry(p.PID) != "" {
			continue
		}
		for _, e := range c.toNVML.byPID[p.PID] {
			if !gpus.hasPool(e.pool) || (e.pool.minor != nil && seenGPU[p.Key()+"/"+fmt.Sprint(*e.pool.minor)]) {
				continue
			}
			ref := processRef(p)
			out = append(out, Finding{
				Kind:     KindGPUInUse,
				Severity: High,
				Summary:  fmt.Sprintf("%s is listed by NVML on %s", describe(ref), e.pool.label),
				Process:  ref,
				GPUUUID:  e.pool.uuid,
				Evidence: []string{entryEvidence(e)},
			})
		}
	}
	return out
}

// poolByUUID finds the pool of a GPU or MIG UUID.
func (ix *nvmlIndex) poolByUUID(uuid string) *pool {
	for _, p := range ix.pools {
		if p.uuid == uuid {
			return p
		}
	}
	return nil
}

package reap

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/snapshot"
)

// GPUAfter is one GPU asked about, as the judgement after the actions sees
// it. It is clean, not clean (a process still holds, maps or is listed on
// it, or memory no process accounts for), or not known to be clean (not
// read).
type GPUAfter struct {
	// GPU is its minor number (the N of /dev/nvidiaN), or the UUID asked
	// for where NVML gave no minor number.
	GPU     string `json:"gpu"`
	UUID    string `json:"uuid,omitempty"`
	Verdict string `json:"verdict"`
	// Why names what keeps it from being clean, one line each.
	Why []string `json:"why,omitempty"`
}

func (g GPUAfter) String() string {
	s := "gpu " + g.GPU
	if g.UUID != "" && g.UUID != g.GPU {
		s += " (" + g.UUID + ")"
	}
	s += ": " + g.Verdict
	if len(g.Why) > 0 {
		s += ": " + strings.Join(g.Why, "; ")
	}
	return s
}

// GPUsAfter says what r, judged on the host to, makes of each GPU of asked
// (nil means every GPU the snapshots show). A failing finding lands on the GPUs
// its process uses or its UUID names, and one naming no GPU on every GPU.
// No GPU is clean unless r's verdict is (docs/reap.md, The proof).
func GPUsAfter(r *diff.Result, to *snapshot.Snapshot, asked *snapshot.GPUSet, failOn diff.FailOn, seen ...*snapshot.Snapshot) []GPUAfter {
	if asked == nil {
		asked = seenGPUs(append([]*snapshot.Snapshot{to}, seen...))
	}
	usage := snapshot.GPUUsage(to)
	var gpus []*gpuAfter
	add := func(set snapshot.GPUSet, name string, minor int) {
		kept, uses := set.Select(usage)
		g := &gpuAfter{after: GPUAfter{GPU: name}, minor: minor, uses: uses, lines: map[string]int{}}
		if minor < 0 {
			g.after.UUID = name
		}
		for _, k := range kept {
			g.after.UUID = k.UUID
			g.uuids = append(g.uuids, k.UUID)
			for _, m := range k.MIG {
				g.uuids = append(g.uuids, m.UUID)
			}
		}
		gpus = append(gpus, g)
	}
	for _, n := range asked.Minors {
		add(snapshot.GPUSet{Minors: []int{n}}, strconv.Itoa(n), n)
	}
	for _, u := range asked.UUIDs {
		i := slices.IndexFunc(usage, func(g snapshot.GPUUse) bool { return g.UUID == u })
		if i >= 0 && usage[i].MinorNumber != nil && slices.Contains(asked.Minors, *usage[i].MinorNumber) {
			continue // asked for twice
		}
		add(snapshot.GPUSet{UUIDs: []string{u}}, u, -1)
	}
	snaps := append([]*snapshot.Snapshot{to}, seen...)
	for _, id := range asked.Accel {
		g := &gpuAfter{after: GPUAfter{GPU: id}, minor: -1, accel: id, lines: map[string]int{}}
		devs := accelNamed(id, snaps)
		g.uses = accelUses(devs, to.Accelerators)
		if len(devs) == 0 {
			g.unseen = "no accelerator the snapshots show has the ID " + id
		}
		gpus = append(gpus, g)
	}
	procs := map[string]*snapshot.Process{}
	for i := range to.Processes {
		p := &to.Processes[i]
		procs[p.Key()] = p
	}
	for _, f := range r.Findings {
		if !(&diff.Result{Findings: []diff.Finding{f}}).FailedOn(failOn) {
			continue
		}
		var p *snapshot.Process
		if f.Process != nil {
			p = procs[f.Process.Key()]
		}
		landed := false
		for _, g := range gpus {
			if (p != nil && g.uses(p)) || (f.GPUUUID != "" && slices.Contains(g.uuids, f.GPUUUID)) {
				g.why(f, "")
				landed = true
			}
		}
		if !landed {
			for _, g := range gpus {
				g.why(f, " (names no GPU asked about: it may concern any)")
			}
		}
	}
	out := make([]GPUAfter, 0, len(gpus))
	for _, g := range gpus {
		g.after.Verdict = diff.VerdictClean
		if len(g.after.Why) > 0 {
			g.after.Verdict = diff.VerdictNotClean
		} else if u := cmp.Or(g.unseen, r.Check.GPUUnchecked(g.minor, cmp.Or(g.accel, g.after.UUID))); u != "" {
			g.after.Verdict, g.after.Why = diff.VerdictUnknown, []string{"not read: " + u}
		}
		out = append(out, g.after)
	}
	return out
}

// gpuAfter is one GPU as GPUsAfter builds it.
type gpuAfter struct {
	after GPUAfter
	minor int // -1 where only a UUID or an accelerator ID names it
	// accel is the other vendor's accelerator ID asked for (amd:0), and
	// unseen says why no device of the snapshots has it.
	accel, unseen string
	uses          func(*snapshot.Process) bool
	uuids         []string       // its own and its MIG devices'
	lines         map[string]int // a process's line in after.Why, by PID@START and suffix
}

// why adds what finding f says of the GPU, one line a process, naming its
// class and the kinds of its findings, and one line each finding of no
// process.
func (g *gpuAfter) why(f diff.Finding, suffix string) {
	if f.Process == nil {
		g.after.Why = append(g.after.Why, f.Kind+": "+f.Summary+suffix)
		return
	}
	key := f.Process.Key() + suffix
	if i, ok := g.lines[key]; ok {
		line := strings.TrimSuffix(g.after.Why[i], suffix)
		g.after.Why[i] = line + ", " + f.Kind + suffix
		return
	}
	class := ""
	if f.Triage != nil {
		class = ", " + f.Triage.Class
	}
	g.lines[key] = len(g.after.Why)
	g.after.Why = append(g.after.Why, fmt.Sprintf("%s (%s)%s: %s%s", f.Process.Key(), f.Process.Comm, class, f.Kind, suffix))
}

// seenGPUs are the GPUs the snapshots show, as NVML's, the device nodes the
// host showed, and those a process holds or maps. A GPU reaped clean is
// seen in the judgement before, where it was used.
func seenGPUs(snaps []*snapshot.Snapshot) *snapshot.GPUSet {
	set := &snapshot.GPUSet{}
	addMinor := func(n int) {
		if !slices.Contains(set.Minors, n) {
			set.Minors = append(set.Minors, n)
		}
	}
	for _, s := range snaps {
		if s == nil {
			continue
		}
		for _, g := range s.NVML.Devices {
			switch {
			case g.MinorNumber != nil:
				addMinor(*g.MinorNumber)
			case g.UUID != "" && !slices.Contains(set.UUIDs, g.UUID):
				set.UUIDs = append(set.UUIDs, g.UUID)
			}
		}
		for _, n := range s.Host.GPUNodes {
			addMinor(n)
		}
		for i := range s.Processes {
			for _, n := range snapshot.GPUMinors(&s.Processes[i]) {
				addMinor(n)
			}
		}
	}
	slices.Sort(set.Minors)
	return set
}

// accelNamed are the other vendors' accelerators of snaps that id names
// (amd:0, a PCI slot, a card node's name), as a diff resolves an
// allocation's IDs.
func accelNamed(id string, snaps []*snapshot.Snapshot) []*snapshot.Accelerator {
	var out []*snapshot.Accelerator
	for _, s := range snaps {
		if s == nil || s.Accelerators == nil {
			continue
		}
		for i := range s.Accelerators.Devices {
			if d := &s.Accelerators.Devices[i]; d.NamedBy(id) {
				out = append(out, d)
			}
		}
	}
	return out
}

// accelUses says whether a process uses one of devs. It does if it holds or
// maps one of their nodes (by device number or path), or KFD (a) says it
// holds memory on one.
func accelUses(devs []*snapshot.Accelerator, a *snapshot.Accelerators) func(*snapshot.Process) bool {
	paths, numbers, kfd := map[string]bool{}, map[snapshot.DeviceNumber]bool{}, map[int]bool{}
	gpuIDs := map[uint32]bool{}
	for _, d := range devs {
		for _, n := range d.Nodes {
			paths[n.Path] = n.Path != ""
			numbers[n.DeviceNumber] = !n.DeviceNumber.IsZero()
		}
		gpuIDs[d.KFDGPUID] = d.KFDGPUID != 0
	}
	if a != nil {
		for _, kp := range a.KFDProcesses {
			for _, m := range kp.VRAM {
				kfd[kp.PID] = kfd[kp.PID] || m.Bytes > 0 && gpuIDs[m.GPUID]
			}
		}
	}
	// A path matches too. A node bound elsewhere under that name is a
	// finding's to tell, and the line errs on not clean.
	node := func(path string, n snapshot.DeviceNumber) bool { return numbers[n] || paths[path] }
	return func(p *snapshot.Process) bool {
		if kfd[p.PID] {
			return true
		}
		for _, h := range p.Holders {
			if node(h.Target, h.DeviceNumber) {
				return true
			}
		}
		for _, m := range p.Mappings {
			if node(m.Path, m.DeviceNumber) {
				return true
			}
		}
		return false
	}
}

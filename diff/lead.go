package diff

import (
	"fmt"
	"slices"
)

// LeadOf is the line that says what to act on first. It names the class,
// process and owner of the finding, not allowed, whose class asks the most
// (Classes' order), and how many other processes or GPUs have findings. A
// finding with no triage leads only where none has one. "" where every finding
// is allowed. docs/triage.md (The lead) has its uses.
func LeadOf(findings []Finding) string {
	lead, rank := -1, len(Classes)+1
	targets := map[string]bool{}
	for i := range findings {
		f := &findings[i]
		if f.Allowed != "" {
			continue
		}
		targets[leadTarget(f)] = true
		r := len(Classes) // no triage
		if f.Triage != nil {
			r = slices.Index(Classes, f.Triage.Class)
		}
		if r < rank {
			lead, rank = i, r
		}
	}
	if lead < 0 {
		return ""
	}
	f := &findings[lead]
	line := f.Kind + ": " + leadTarget(f)
	if t := f.Triage; t != nil {
		line = t.Class + ": " + leadTarget(f)
		if t.Owner != "" {
			line += ", owner " + t.Owner
		}
	}
	if n := len(targets) - 1; n > 0 {
		line += fmt.Sprintf("; and %d more", n)
	}
	return line
}

// leadTarget names what a finding is about, shortly, as a process by PID and
// name, a GPU, a device node or the host.
func leadTarget(f *Finding) string {
	switch p := f.Process; {
	case p != nil && p.Comm != "":
		return fmt.Sprintf("pid %d (%s)", p.PID, p.Comm)
	case p != nil:
		return fmt.Sprintf("pid %d", p.PID)
	case f.GPUUUID != "":
		return "GPU " + f.GPUUUID
	case f.Device != "":
		return "device " + f.Device
	}
	return "the host"
}

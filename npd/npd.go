// Package npd speaks Node Problem Detector's custom-plugin protocol for
// gpusnap check. The exit status is the verdict (0 OK, 1 a problem, any other
// unknown). The first stdout line, which NPD puts on the node's condition or
// event, names the worst finding within NPD's default 80-byte cap.
package npd

import (
	"cmp"
	"fmt"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/internal/safetext"
)

// MaxLine is NPD's default max_output_length. NPD cuts the message there,
// so the line is made to fit rather than be cut mid-word by NPD.
const MaxLine = 80

// Line is the message of a check's result r. It gives the count of findings
// at the worst severity and the first of them (`2 high: gpu_in_use of nvidia3
// by 4711 (python3)`), or what was checked when nothing is at or above
// failOn. A check that did not see everything never says clean.
func Line(r *diff.Result, failOn diff.FailOn) string {
	failed := r.FailedOn(failOn)
	if !failed && r.Check != nil && len(r.Check.Unchecked) > 0 {
		// check exits 2 here, which NPD reads as unknown.
		return fit("not known to be clean: " + safetext.Escape(r.Check.Unchecked[0]))
	}
	if len(r.Findings) == 0 {
		gpus := "all"
		if r.Check != nil {
			gpus = cmp.Or(r.Check.GPUs, "none (every GPU is given to a pod)")
		}
		if len(r.Notes) > 0 {
			// What was not seen (the kernel log's Xids, NVML) is in check's notes.
			return fit(fmt.Sprintf("no findings on GPUs %s; not seen: %d (gpusnap check)", safetext.Escape(gpus), len(r.Notes)))
		}
		return fit("clean: GPUs " + safetext.Escape(gpus))
	}
	worst := &r.Findings[0] // sorted, highest severity first
	n := 0
	for i := range r.Findings {
		if r.Findings[i].Severity == worst.Severity {
			n++
		}
	}
	what := name(worst)
	if worst.Triage != nil {
		// The class goes first so that what the operator must do survives the cut.
		what = worst.Triage.Class + ": " + what
	}
	line := fmt.Sprintf("%d %s: %s", n, worst.Severity, what)
	if !failed {
		line = "below --fail-on " + failOn.String() + ": " + line
	}
	return fit(line)
}

// Unknown is the message of a check that could not give a verdict.
func Unknown(err error) string {
	return fit("unknown: " + safetext.Line(strings.ReplaceAll(err.Error(), "\n", " ")))
}

// name names a finding in a few words by its kind, the device node or GPU,
// and the process by PID and comm. The comm is escaped because a tenant
// names its processes.
func name(f *diff.Finding) string {
	s := f.Kind
	switch {
	case f.Device != "":
		s += " of " + safetext.Escape(path.Base(f.Device))
	case f.GPUUUID != "":
		s += " of " + safetext.Escape(shortUUID(f.GPUUUID))
	}
	if p := f.Process; p != nil {
		s += fmt.Sprintf(" by %d", p.PID)
		if p.Comm != "" {
			s += " (" + safetext.Escape(p.Comm) + ")"
		}
	}
	return s
}

// shortUUID keeps a GPU UUID's prefix and first group (GPU-3f2a8c1e), which
// tells a node's GPUs apart and leaves the line room for the process.
func shortUUID(uuid string) string {
	if i := strings.IndexByte(uuid[min(len(uuid), 4):], '-'); i >= 0 {
		return uuid[:4+i]
	}
	return uuid
}

// fit cuts s to MaxLine bytes at a rune boundary, ending in "..." when cut.
func fit(s string) string {
	if len(s) <= MaxLine {
		return s
	}
	cut := MaxLine - 3
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

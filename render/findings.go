package render

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/internal/safetext"
)

// textEvidenceLines caps the evidence printed per finding in the text
// report. --json carries all of it.
const textEvidenceLines = 20

// JSON writes v indented by two spaces, one value and a newline, as every
// --json prints (a diff's result is the object docs/spec.md (JSON) names).
func JSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// ResultText writes the report an operator reads. It holds one summary line,
// the lead (diff.LeadOf) where a finding is not allowed, what was not
// checked, then one block per process (processBlocks). verbose gives instead
// each finding in full, by severity. Every string a process controls (comm,
// exe, cmdline, paths, maps lines) is escaped.
func ResultText(w io.Writer, r *diff.Result, verbose bool) error {
	b := bufio.NewWriter(w)
	fmt.Fprintln(b, summaryLine(r))
	if lead := diff.LeadOf(r.Findings); lead != "" {
		fmt.Fprintln(b, "lead: "+safetext.Escape(lead))
	}
	if verbose {
		writeScope(b, r, writeLine)
		writeBySeverity(b, r.Findings)
	} else {
		// What was not checked is never cut, only wrapped.
		writeScope(b, r, func(b *bufio.Writer, label, text string) { writeWrapped(b, label, text, 0) })
		writeBlocks(b, processBlocks(r.Findings))
	}
	if len(r.MapsDiffs) > 0 {
		keys := make([]string, 0, len(r.MapsDiffs))
		for k := range r.MapsDiffs {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(b, "\nmaps diff of %s:\n", k)
			for _, line := range strings.SplitAfter(strings.TrimSuffix(r.MapsDiffs[k], "\n"), "\n") {
				fmt.Fprintln(b, safetext.Escape(strings.TrimSuffix(line, "\n")))
			}
		}
	}
	return b.Flush()
}

// writeScope writes, with write, what a check did not check and the notes
// on what a diff or check could not compare.
func writeScope(b *bufio.Writer, r *diff.Result, write func(b *bufio.Writer, label, text string)) {
	if r.Check != nil {
		for _, u := range r.Check.Unchecked {
			write(b, "unchecked: ", safetext.Escape(u))
		}
	}
	for _, n := range r.Notes {
		write(b, "note: ", safetext.Escape(n))
	}
}

// writeLine writes label and text on one line, whatever its length.
func writeLine(b *bufio.Writer, label, text string) {
	fmt.Fprintf(b, "%s%s\n", label, text)
}

// summaryLine gives the counts by severity, the tenant, and the two snapshots with their times.
func summaryLine(r *diff.Result) string {
	var counts []string
	for s := diff.Critical; s >= diff.Info; s-- {
		name := s.String()
		if n := r.Summary.BySeverity[name]; n > 0 || s != diff.Critical {
			counts = append(counts, fmt.Sprintf("%d %s", n, name))
		}
	}
	line := "gpusnap diff: "
	switch {
	case r.Check != nil:
		// A check speaks of now, giving its answer, then the counts behind it.
		line = "gpusnap check: " + cmp.Or(r.Check.Verdict, diff.VerdictUnknown) + ": "
	case r.Summary.Total == 0 && r.Complete:
		line += "clean: "
	case r.Summary.Total == 0:
		line += "no findings in what was compared, but not all was (see the notes): "
	}
	line += strings.Join(counts, ", ")
	if r.Summary.Allowed > 0 {
		line += fmt.Sprintf(" (%d allowed)", r.Summary.Allowed)
	}
	if r.Tenant != "" {
		line += "; tenant " + safetext.Escape(r.Tenant)
	}
	if r.Check != nil {
		return line + fmt.Sprintf("; GPUs %s; at %s", safetext.Escape(r.Check.GPUs), captureTime(r.ToTime))
	}
	return line + fmt.Sprintf("; from %s (%s) to %s (%s)",
		r.From, captureTime(r.FromTime), r.To, captureTime(r.ToTime))
}

// writeBySeverity writes the findings under a heading per severity, each
// with all its detail (--verbose).
func writeBySeverity(b *bufio.Writer, findings []diff.Finding) {
	var current diff.Severity = -1
	for i := range findings {
		f := &findings[i]
		if f.Severity != current {
			current = f.Severity
			fmt.Fprintf(b, "\n%s\n", strings.ToUpper(current.String()))
		}
		writeFinding(b, f)
	}
}

func writeFinding(b *bufio.Writer, f *diff.Finding) {
	fmt.Fprintf(b, "  %s: %s\n", f.Kind, safetext.Escape(f.Summary))
	if p := f.Process; p != nil && p.StartTime == 0 && p.Comm == "" {
		fmt.Fprintf(b, "    process: pid %d, no process behind it\n", p.PID)
	} else if p != nil {
		fmt.Fprintf(b, "    process: %s uid %d", p.Key(), p.UID)
		if p.Cgroup != "" {
			fmt.Fprintf(b, " cgroup %s", safetext.Escape(p.Cgroup))
		}
		if p.ContainerID != "" {
			fmt.Fprintf(b, " container %s", safetext.Escape(p.ContainerID))
		}
		b.WriteByte('\n')
		if len(p.Cmdline) > 0 {
			fmt.Fprintf(b, "    cmdline: %s\n", safetext.Join(p.Cmdline))
		}
	}
	if f.Device != "" || f.GPUUUID != "" {
		fmt.Fprint(b, "   ")
		if f.Device != "" {
			fmt.Fprintf(b, " device: %s", safetext.Escape(f.Device))
		}
		if f.GPUUUID != "" {
			fmt.Fprintf(b, " gpu: %s", safetext.Escape(f.GPUUUID))
		}
		b.WriteByte('\n')
	}
	if f.Time != nil {
		fmt.Fprintf(b, "    time: %s\n", f.Time.UTC().Format(time.RFC3339))
	}
	if f.InheritedFrom != "" {
		fmt.Fprintf(b, "    inherited from %s\n", safetext.Escape(f.InheritedFrom))
	}
	if f.Allowed != "" {
		fmt.Fprintf(b, "    allowed by %s\n", safetext.Escape(f.Allowed))
	}
	if t := f.Triage; t != nil {
		fmt.Fprintf(b, "    triage: %s; next: %s\n", t.Class, safetext.Escape(t.Next))
		for _, why := range t.Why {
			fmt.Fprintf(b, "      why: %s\n", safetext.Escape(why))
		}
	}
	for i, e := range f.Evidence {
		if i == textEvidenceLines {
			fmt.Fprintf(b, "      ... %d more evidence lines (--json has them all)\n", len(f.Evidence)-i)
			break
		}
		fmt.Fprintf(b, "      %s\n", safetext.Escape(e))
	}
}

// captureTime is when a snapshot was taken, for report lines.
func captureTime(t time.Time) string {
	if t.IsZero() {
		return "time unknown"
	}
	return t.UTC().Format(time.RFC3339)
}

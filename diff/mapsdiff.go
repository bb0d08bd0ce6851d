package diff

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/sergi/go-diff/diffmatchpatch"

	"github.com/gpusnap/gpusnap/snapshot"
)

// mapsContext is the context lines around each change, as diff -u has them.
const mapsContext = 3

// mapsDiffs gives, for each process a finding names, the unified diff of its
// maps text between FROM and TO (a new process's text is all additions, a
// gone one's all removals), by PID@START. Processes whose maps text capture
// did not keep, or that did not change, have none.
func (c *comparison) mapsDiffs(findings []Finding) map[string]string {
	out := make(map[string]string)
	for _, f := range findings {
		if f.Process == nil {
			continue
		}
		key := f.Process.Key()
		if _, done := out[key]; done {
			continue
		}
		id := idOf(f.Process.PID, f.Process.StartTime)
		before, after := c.fromByKey[id], c.toByKey[id]
		a, b, what := rawMaps(before), rawMaps(after), "maps"
		if before != nil && after != nil && (before.Raw == nil) != (after.Raw == nil) {
			// Capture keeps maps text only while a process uses an NVIDIA
			// device. For a survivor that did not at one end, diff the
			// device mappings both ends hold, not every line as new or gone.
			a, b, what = deviceLines(before), deviceLines(after), "device-mappings"
		}
		if d := UnifiedDiff(a, b, c.from.ID+"/"+key+"/"+what, c.to.ID+"/"+key+"/"+what); d != "" {
			out[key] = d
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func rawMaps(p *snapshot.Process) string {
	if p == nil || p.Raw == nil {
		return ""
	}
	return p.Raw.Maps
}

// deviceLines renders a process's device mappings as maps lines, in address
// order as the kernel lists them
// (capture lists NVIDIA devices first).
func deviceLines(p *snapshot.Process) string {
	ms := slices.Clone(p.Mappings)
	slices.SortStableFunc(ms, func(x, y snapshot.Mapping) int { return cmp.Compare(x.Start, y.Start) })
	var b strings.Builder
	for _, m := range ms {
		b.WriteString(m.Line())
		b.WriteByte('\n')
	}
	return b.String()
}

// diffLine is one line of a line diff, marked ' ' kept, '-' removed or '+'
// added. The text keeps its newline, and only a file's last line may lack one.
type diffLine struct {
	op   byte
	text string
}

// UnifiedDiff returns the unified diff (diff -u, 3 lines of context) from a
// to b, headed by the two names, or "" when they are equal. Lines are diffed
// whole, as go-diff's character diff runs over one rune per distinct line.
func UnifiedDiff(a, b, aName, bName string) string {
	if a == b {
		return ""
	}
	dmp := diffmatchpatch.New()
	dmp.DiffTimeout = 0 // exact, however long the maps
	ca, cb, lines := dmp.DiffLinesToChars(a, b)
	diffs := dmp.DiffCharsToLines(dmp.DiffMain(ca, cb, false), lines)

	var ops []diffLine
	for _, d := range diffs {
		op := byte(' ')
		switch d.Type {
		case diffmatchpatch.DiffDelete:
			op = '-'
		case diffmatchpatch.DiffInsert:
			op = '+'
		}
		for text := d.Text; text != ""; {
			line, rest, found := strings.Cut(text, "\n")
			if found {
				line += "\n"
			}
			ops = append(ops, diffLine{op, line})
			text = rest
		}
	}

	var b2 strings.Builder
	fmt.Fprintf(&b2, "--- %s\n+++ %s\n", aName, bName)
	writeHunks(&b2, ops, mapsContext)
	return b2.String()
}

// writeHunks writes the changes in ops as @@ hunks with context lines around
// each. Changes closer than twice the context share a hunk, as in diff -u.
func writeHunks(w *strings.Builder, ops []diffLine, context int) {
	// oldAt[i] and newAt[i] count the lines of each side before ops[i].
	oldAt := make([]int, len(ops)+1)
	newAt := make([]int, len(ops)+1)
	for i, o := range ops {
		oldAt[i+1], newAt[i+1] = oldAt[i], newAt[i]
		if o.op != '+' {
			oldAt[i+1]++
		}
		if o.op != '-' {
			newAt[i+1]++
		}
	}
	n := len(ops)
	for i := 0; i < n; {
		for i < n && ops[i].op == ' ' {
			i++
		}
		if i == n {
			return
		}
		start := max(0, i-context)
		last := i // the last change in this hunk
		for k := i; k < n; {
			if ops[k].op != ' ' {
				last = k
				k++
				continue
			}
			run := k
			for run < n && ops[run].op == ' ' {
				run++
			}
			if run == n || run-k > 2*context {
				break
			}
			k = run
		}
		end := min(n, last+1+context)
		fmt.Fprintf(w, "@@ -%s +%s @@\n",
			hunkRange(oldAt[start], oldAt[end]-oldAt[start]),
			hunkRange(newAt[start], newAt[end]-newAt[start]))
		for _, o := range ops[start:end] {
			w.WriteByte(o.op)
			w.WriteString(o.text)
			if !strings.HasSuffix(o.text, "\n") {
				w.WriteString("\n\\ No newline at end of file\n")
			}
		}
		i = end
	}
}

// hunkRange writes one side of a hunk header as diff -u does, "l,c", or "l"
// alone for one line, and the line before for none.
func hunkRange(before, count int) string {
	switch count {
	case 0:
		return fmt.Sprintf("%d,0", before)
	case 1:
		return fmt.Sprintf("%d", before+1)
	default:
		return fmt.Sprintf("%d,%d", before+1, count)
	}
}

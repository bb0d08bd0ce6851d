package render

import (
	"bufio"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/internal/safetext"
)

// A block is what an operator acts on, one process (or one GPU, or the host)
// and every finding about it, headed by the triage of its worst finding. The
// text report, report.md and report.html all lead with the blocks, and every
// string in one has been through safetext.Escape.
type block struct {
	Title    string // the process as summary lines name it, a GPU, a device or the host
	Class    string // "" where no finding of the block has a triage
	Next     string
	Why      []string
	Findings []blockLine
}

// blockLine is one finding of a block, on one line.
type blockLine struct {
	N        int // the finding's number in report order (ordered)
	Severity string
	Kind     string
	// Text is the finding's summary less the block's title, with its own
	// class where it is not the block's (an allowed finding's, expected, is
	// in its block's why, or in brackets).
	Text string
}

// processBlocks groups the findings, in report order, by what they are
// about. Blocks come in the order of their worst finding.
func processBlocks(fs []diff.Finding) []block {
	var out []block
	index := map[string]int{}
	for i, f := range ordered(fs) {
		key, title, prefix := blockOf(&f)
		at, ok := index[key]
		if !ok {
			at = len(out)
			index[key] = at
			out = append(out, block{Title: safetext.Escape(title)})
		}
		b := &out[at]
		if b.Class == "" && f.Triage != nil {
			b.Class, b.Next = f.Triage.Class, safetext.Escape(f.Triage.Next)
			for _, w := range f.Triage.Why {
				b.Why = append(b.Why, safetext.Escape(w))
			}
		}
		text := strings.TrimPrefix(f.Summary, prefix)
		if f.Triage != nil && f.Triage.Class != b.Class {
			text += " [" + f.Triage.Class + "]"
		}
		b.Findings = append(b.Findings, blockLine{N: i + 1, Severity: f.Severity.String(), Kind: safetext.Escape(f.Kind), Text: safetext.Escape(text)})
	}
	return out
}

// blockOf is the key of the block a finding belongs to, the block's title,
// and what to cut from the finding's summary, which names the process too.
func blockOf(f *diff.Finding) (key, title, prefix string) {
	switch p := f.Process; {
	case p != nil && (p.StartTime != 0 || p.Comm != ""):
		return "process " + p.Key(), p.Describe(), p.Describe() + " "
	case p != nil:
		return fmt.Sprint("pid ", p.PID), fmt.Sprintf("pid %d (no live process)", p.PID), ""
	case f.GPUUUID != "":
		return "gpu " + f.GPUUUID, "GPU " + f.GPUUUID, ""
	case f.Device != "":
		return "device " + f.Device, "device " + f.Device, ""
	}
	return "host", "the host", ""
}

// Bounds of the text report's blocks. A next or why is wrapped at textWidth
// runes and cut past textItemLines lines, and a finding's line is cut at
// textLineWidth (as ps's table fits 120 columns). --verbose and --json keep
// all of it.
const (
	textWidth     = 100
	textItemLines = 3
	textLineWidth = 120
)

// writeBlocks writes the blocks of the text report.
func writeBlocks(b *bufio.Writer, blocks []block) {
	for _, bl := range blocks {
		fmt.Fprintf(b, "\n%s\n", cut(bl.Title, textLineWidth))
		if bl.Class != "" {
			fmt.Fprintf(b, "  class: %s\n", bl.Class)
			writeWrapped(b, "  next:  ", bl.Next, textItemLines)
			for _, w := range bl.Why {
				writeWrapped(b, "  why:   ", w, textItemLines)
			}
		}
		for _, l := range bl.Findings {
			fmt.Fprintln(b, cut(fmt.Sprintf("  %-6s %s: %s", strings.ToUpper(l.Severity), l.Kind, l.Text), textLineWidth))
		}
	}
}

// writeWrapped writes text after label, wrapped at spaces within textWidth
// and indented under its first line. It is cut past maxLines lines, unless
// maxLines is 0.
func writeWrapped(b *bufio.Writer, label, text string, maxLines int) {
	indent := strings.Repeat(" ", utf8.RuneCountInString(label))
	lines := wrap(text, textWidth-len(indent))
	if maxLines > 0 && len(lines) > maxLines {
		lines = lines[:maxLines]
		lines[maxLines-1] = cut(lines[maxLines-1]+" …", textWidth-len(indent))
	}
	for i, l := range lines {
		if i == 0 {
			fmt.Fprintf(b, "%s%s\n", label, l)
		} else {
			fmt.Fprintf(b, "%s%s\n", indent, l)
		}
	}
}

// wrap breaks text into lines of at most width runes, at spaces where it
// can and inside a word longer than a line where it cannot.
func wrap(text string, width int) []string {
	var lines []string
	var line []rune
	for _, word := range strings.Fields(text) {
		w := []rune(word)
		if len(line) > 0 && len(line)+1+len(w) > width {
			lines, line = append(lines, string(line)), nil
		}
		if len(line) > 0 {
			line = append(line, ' ')
		}
		line = append(line, w...)
		for len(line) > width {
			lines, line = append(lines, string(line[:width])), line[width:]
		}
	}
	if len(line) > 0 || len(lines) == 0 {
		lines = append(lines, string(line))
	}
	return lines
}

// cut shortens s to width runes, the last of them "…".
func cut(s string, width int) string {
	r := []rune(s)
	if len(r) <= width {
		return s
	}
	return string(r[:width-1]) + "…"
}

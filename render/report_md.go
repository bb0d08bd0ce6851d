package render

import (
	"bytes"
	"fmt"
	"strings"
)

// markdown renders report.md. Values that a process could choose stand in
// code spans or fenced blocks, so a Markdown viewer shows them literally and
// never as HTML, links or emphasis. Free text is backslash-escaped.
func (r *report) markdown() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# %s\n\n", mdText(r.Title))
	fmt.Fprintf(&b, "**%s**\n\n", mdText(r.Verdict))
	if r.Lead != "" {
		fmt.Fprintf(&b, "Lead: %s\n\n", mdText(r.Lead))
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "> Note: %s\n>\n", mdText(n))
	}
	if len(r.Notes) > 0 {
		b.WriteString("\n")
	}
	for _, s := range []snapRow{r.Before, r.After} {
		fmt.Fprintf(&b, "- %s: snapshot %s (%s), taken %s\n", s.Role, mdCode(s.ID), mdText(s.Label), s.Time)
	}
	for _, f := range r.Host {
		fmt.Fprintf(&b, "- %s: %s\n", f.Name, mdCode(f.Value))
	}
	fmt.Fprintf(&b, "- written by gpusnap %s, run as uid %d\n\n", mdCode(r.Version), r.UID)
	mdBlocks(&b, r.Blocks)

	b.WriteString("## Time line\n\n")
	for _, e := range r.Timeline {
		fmt.Fprintf(&b, "- %s: %s\n", e.Time, mdText(e.What))
	}
	b.WriteString("\n## Findings\n\n")
	if len(r.Groups) == 0 {
		b.WriteString("None.\n\n")
	}
	for _, g := range r.Groups {
		fmt.Fprintf(&b, "### %s (%d)\n\n", g.Severity, len(g.Findings))
		for _, f := range g.Findings {
			fmt.Fprintf(&b, "#### %d. %s: %s\n\n", f.N, f.Kind, mdText(f.Summary))
			for _, fd := range f.Fields {
				fmt.Fprintf(&b, "- %s: %s\n", fd.Name, mdCode(fd.Value))
			}
			if len(f.Evidence) > 0 {
				b.WriteString("\nEvidence:\n\n")
				mdBlock(&b, "", f.Evidence)
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("## Processes involved\n\n")
	if len(r.Processes) == 0 {
		b.WriteString("None.\n\n")
	}
	for _, p := range r.Processes {
		fmt.Fprintf(&b, "### %s %s\n\n", mdCode(p.Key), mdCode(p.Comm))
		for _, fd := range p.Fields {
			fmt.Fprintf(&b, "- %s: %s\n", fd.Name, mdCode(fd.Value))
		}
		if p.RawDir != "" {
			fmt.Fprintf(&b, "- kernel text as captured: %s\n", mdCode(p.RawDir))
		}
		if p.DiffFile == "" {
			b.WriteString("\nNo maps diff.\n\n")
			continue
		}
		fmt.Fprintf(&b, "\nMaps diff (%s):\n\n", mdCode(p.DiffFile))
		lines := make([]string, len(p.Diff))
		for i, l := range p.Diff {
			lines[i] = l.Text
		}
		mdBlock(&b, "diff", lines)
		b.WriteString("\n")
	}
	return b.Bytes()
}

// mdBlocks writes the section that leads the page, one block per process
// with its class, next and why, and its findings one a line.
func mdBlocks(b *bytes.Buffer, blocks []block) {
	if len(blocks) == 0 {
		return
	}
	b.WriteString("## What to do\n\n")
	for _, bl := range blocks {
		fmt.Fprintf(b, "### %s\n\n", mdCode(bl.Title))
		if bl.Class != "" {
			fmt.Fprintf(b, "- class: **%s**\n- next: %s\n", mdText(bl.Class), mdText(bl.Next))
			for _, w := range bl.Why {
				fmt.Fprintf(b, "- why: %s\n", mdText(w))
			}
			b.WriteString("\n")
		}
		for _, l := range bl.Findings {
			fmt.Fprintf(b, "- finding %d, %s: %s: %s\n", l.N, l.Severity, mdText(l.Kind), mdText(l.Text))
		}
		b.WriteString("\n")
	}
}

// mdSpecial are the characters that mean something inside a Markdown line.
const mdSpecial = "\\`*_[]<>|~&"

// mdText backslash-escapes s, which is already free of line breaks. It also
// breaks what a GitHub-flavoured viewer would turn into a link by itself
// (www.evil.io/pwn, http://..., a@b.c), since a process named like that is
// not a link. It escapes the '.' after "www", the ':' before "//", and an
// '@' with a dot after it in the same word.
func mdText(s string) string {
	var b strings.Builder
	for i, r := range s {
		rest := s[i+1:]
		link := r == '.' && i >= 3 && strings.EqualFold(s[i-3:i], "www") ||
			r == ':' && strings.HasPrefix(rest, "//") ||
			r == '@' && mailDomain(rest)
		if strings.ContainsRune(mdSpecial, r) || link {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// mailDomain reports whether the word after an '@' has a dot, as the domain
// of a mail address does. It looks no further than a domain can be long, so
// a name of many '@' costs no more than its length times that.
func mailDomain(rest string) bool {
	word := rest[:min(len(rest), 253)]
	if j := strings.IndexAny(word, " \t"); j >= 0 {
		word = word[:j]
	}
	return strings.Contains(word, ".")
}

// mdCode wraps s in a code span whose backtick fence is longer than any run
// of backticks in s, as CommonMark allows.
func mdCode(s string) string {
	if s == "" {
		return "(none)"
	}
	fence := strings.Repeat("`", longestRun(s, '`')+1)
	if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") {
		s = " " + s + " "
	}
	return fence + s + fence
}

// mdBlock writes lines as a fenced code block whose fence no line can close.
func mdBlock(b *bytes.Buffer, info string, lines []string) {
	n := 3
	for _, l := range lines {
		n = max(n, longestRun(l, '`')+1)
	}
	fence := strings.Repeat("`", n)
	b.WriteString(fence + info + "\n")
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
	b.WriteString(fence + "\n")
}

func longestRun(s string, c byte) int {
	best, run := 0, 0
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			run++
			best = max(best, run)
		} else {
			run = 0
		}
	}
	return best
}

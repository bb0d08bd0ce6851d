package render

import (
	"bufio"
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/internal/ghostcase"
)

// triaged is the ghost case with a verdict on each process: the miner's
// why long enough to wrap, and one finding of the ghost with a class of its
// own.
func triaged() BundleInput {
	in := testInput()
	long := strings.Repeat("masquerade: exe /tmp/x lies under /tmp ", 20)
	for i := range in.Result.Findings {
		f := &in.Result.Findings[i]
		switch f.Process.PID {
		case 666:
			f.Triage = &diff.Triage{Class: diff.ClassSuspectedCompromise, Next: "contain the node: drain it", Why: []string{long, "tcp connection to 10.0.0.1:3333"}}
		default:
			f.Triage = &diff.Triage{Class: diff.ClassLeftoverWorker, Next: "kill -9 4243", Why: []string{"reparented"}}
		}
	}
	in.Result.Findings[2].Triage = &diff.Triage{Class: diff.ClassExpected, Next: "none"}
	return in
}

func TestBlocksOnePerProcess(t *testing.T) {
	blocks := processBlocks(triaged().Result.Findings)
	if len(blocks) != 2 {
		t.Fatalf("%d blocks, want one per process: %+v", len(blocks), blocks)
	}
	miner, ghost := blocks[0], blocks[1]
	if miner.Class != diff.ClassSuspectedCompromise || len(miner.Findings) != 2 || miner.Findings[0].N != 1 || miner.Findings[1].N != 4 {
		t.Errorf("miner's block: %+v", miner)
	}
	if !strings.HasPrefix(miner.Title, "pid 666 (") || strings.Contains(miner.Title, "\x1b") {
		t.Errorf("miner's title %q", miner.Title)
	}
	if ghost.Class != diff.ClassLeftoverWorker || ghost.Next != "kill -9 4243" || len(ghost.Findings) != 2 ||
		!strings.HasSuffix(ghost.Findings[1].Text, " ["+diff.ClassExpected+"]") || strings.Contains(ghost.Findings[0].Text, "[") {
		t.Errorf("ghost's block: %+v", ghost)
	}
}

// Every line of the blocks stays within its bound, and a why past its lines
// is cut, marked; the findings' lines each hold one finding.
func TestBlockLinesAreBounded(t *testing.T) {
	var out bytes.Buffer
	b := bufio.NewWriter(&out)
	writeBlocks(b, processBlocks(triaged().Result.Findings))
	if err := b.Flush(); err != nil {
		t.Fatal(err)
	}
	whyLines := 0
	for _, line := range strings.Split(out.String(), "\n") {
		if n := utf8.RuneCountInString(line); n > textLineWidth {
			t.Errorf("line of %d runes: %q", n, line)
		}
		if strings.HasPrefix(line, "  why:   masquerade") || (whyLines > 0 && strings.HasPrefix(line, "         ")) {
			whyLines++
		} else if whyLines > 0 && !strings.HasPrefix(line, "  why:") {
			break
		}
	}
	if whyLines != textItemLines || !strings.Contains(out.String(), " …\n  why:   tcp connection to 10.0.0.1:3333\n") {
		t.Errorf("the long why is %d lines (want %d, cut), then the next:\n%s", whyLines, textItemLines, out.String())
	}
	if n := strings.Count(out.String(), "\n  HIGH   ") + strings.Count(out.String(), "\n  MEDIUM "); n != 4 {
		t.Errorf("%d finding lines, want 4:\n%s", n, out.String())
	}
}

func TestWrap(t *testing.T) {
	for _, tc := range []struct {
		text  string
		width int
		want  []string
	}{
		{"", 10, []string{""}},
		{"a bb ccc", 4, []string{"a bb", "ccc"}},
		{"abcdefghij", 4, []string{"abcd", "efgh", "ij"}},
		{"ééé ééé", 3, []string{"ééé", "ééé"}},
	} {
		if got := wrap(tc.text, tc.width); strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("wrap(%q, %d) = %q, want %q", tc.text, tc.width, got, tc.want)
		}
	}
	if got := cut("abcdef", 4); got != "abc…" {
		t.Errorf("cut = %q", got)
	}
}

// report.md and report.html lead with the lead line, then the blocks: each
// process's class, next and why stand before the time line and the findings
// in full.
func TestReportsLeadWithBlocks(t *testing.T) {
	p := pages(t, triaged())
	for name, page := range map[string]string{"report.md": string(p.Markdown), "report.html": string(p.HTML)} {
		first := strings.Index(page, "What to do")
		for _, want := range []string{diff.ClassSuspectedCompromise, "contain the node: drain it", "tcp connection to 10.0.0.1:3333",
			diff.ClassLeftoverWorker, "kill -9 4243", "Time line"} {
			if name == "report.md" {
				want = mdText(want)
			}
			if first < 0 || !strings.Contains(page[first:], want) {
				t.Errorf("%s: %q not after the blocks' heading (at %d)", name, want, first)
			}
		}
		class := diff.ClassSuspectedCompromise
		if name == "report.md" {
			class = mdText(class)
		}
		if lead := strings.Index(page, "Lead: "); lead < 0 || lead > first || !strings.Contains(page[lead:first], class) {
			t.Errorf("%s: no lead naming the suspected compromise before the blocks", name)
		}
		if strings.Index(page, "Time line") < strings.Index(page, "kill -9 4243") {
			t.Errorf("%s: the time line comes before the blocks", name)
		}
	}
	if md := string(p.Markdown); !strings.Contains(md, "- class: **leftover\\_worker**\n- next: kill -9 4243\n- why: reparented\n") ||
		!strings.Contains(md, "- finding 4, medium: leftover\\_device\\_mapping: ") {
		t.Errorf("report.md's blocks:\n%s", md)
	}
	if html := string(p.HTML); !strings.Contains(html, `<section class="block" data-class="suspected_compromise">`) ||
		!strings.Contains(html, `<td class="next">kill -9 4243</td>`) || strings.Contains(html, ghostcase.HostileComm) {
		t.Errorf("report.html's blocks:\n%s", html)
	}
}

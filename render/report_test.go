package render

import (
	"bytes"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/internal/ghostcase"
)

// testInput is the shared ghost case as the pages' input, laid out as the
// bundle lays out its files.
func testInput() BundleInput {
	c := ghostcase.New()
	return BundleInput{Before: c.Before, After: c.After, Result: c.Result, Version: "1.0.0-test", UID: 0,
		TenantStart: c.TenantStart, TenantEnd: c.TenantEnd, MapsDir: "maps", RawDir: "raw"}
}

func pages(t *testing.T, in BundleInput) *Pages {
	t.Helper()
	p, err := BundlePages(in)
	if err != nil {
		t.Fatalf("BundlePages: %v", err)
	}
	return p
}

func TestReportsEscapeHostileStrings(t *testing.T) {
	p := pages(t, testInput())
	md, html := p.Markdown, p.HTML
	for name, text := range map[string][]byte{"report.md": md, "report.html": html} {
		if !utf8.Valid(text) {
			t.Errorf("%s is not valid UTF-8", name)
		}
		if bytes.ContainsAny(text, "\x1b\x07\x00") {
			t.Errorf("%s holds a raw control character", name)
		}
		if bytes.Contains(text, []byte("\n- forged")) {
			t.Errorf("%s: a newline in a command line forged a line", name)
		}
	}
	// HTML: no markup from a process survives; it shows as text.
	low := strings.ToLower(string(html))
	for _, bad := range []string{"<script", "<img"} {
		if strings.Contains(low, bad) {
			t.Errorf("report.html holds %q", bad)
		}
	}
	if !strings.Contains(string(html), "&lt;script&gt;alert(1)&lt;/script&gt;") || !strings.Contains(string(html), `\x1b[31mminer\xff`) {
		t.Errorf("report.html does not show the hostile name escaped")
	}
	// Markdown: every process value sits in a code span or block, or is backslash-escaped.
	for _, line := range strings.Split(string(md), "\n") {
		if strings.Contains(line, "<script>") && !inCode(line, "<script>") {
			t.Errorf("report.md: raw markup outside code: %q", line)
		}
	}
	if !strings.Contains(string(md), "\\<script\\>") || !strings.Contains(string(md), "``python3 -c x\\n- forged: line\\x1b]0;pwned\\x07 `code` <img") {
		t.Errorf("report.md does not quote the hostile strings:\n%s", md)
	}
}

// inCode reports whether every occurrence of s in a Markdown line lies in a
// code span or in a fenced block line (which the test sees as a plain line).
func inCode(line, s string) bool {
	if !strings.HasPrefix(line, "- ") && !strings.HasPrefix(line, "#") {
		return true // a line of a fenced block
	}
	i := strings.Index(line, s)
	return strings.Count(line[:i], "`")%2 == 1
}

func TestReportContents(t *testing.T) {
	in := testInput()
	md := string(pages(t, in).Markdown)
	for _, want := range []string{
		"**4 findings: 3 high, 1 medium.**\n\nLead: unexpected\\_gpu\\_process: pid 666 (\\<script\\>alert(1)\\</script\\>); and 1 more\n\n> Note: NVML was not read at FROM: library not found\n",
		"### high (3)", "### medium (1)",
		"#### 1. unexpected_gpu_process:", "#### 4. leftover_device_mapping:",
		"- inherited from: `4242@987600 (/usr/bin/python3.11)`",
		"- container: `0123456789abcdef",
		"- kernel text as captured: `raw/4243@987654/`",
		"Maps diff (`maps/4243@987654.diff`)",
		"+7f0000000000-7f0000200000 rw-s 00000000 00:06 811 /dev/nvidia0",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	// The time line is in order: baseline, tenant start, ghost, miner, tenant end, post.
	order := []string{"FROM snapshot 20261129-100000", "tenant job-4242 started", "process 4243@987654", "process 666@990000", "tenant job-4242 ended", "TO snapshot 20261129-120000"}
	last := -1
	for _, s := range order {
		i := strings.Index(md, s)
		if i < last {
			t.Errorf("time line: %q out of order", s)
		}
		last = i
	}

	// The HTML page leads with the same line as report.md and the text report.
	if html := string(pages(t, in).HTML); !strings.Contains(html, `<p class="lead" id="lead">Lead: unexpected_gpu_process: pid 666 (&lt;script&gt;alert(1)&lt;/script&gt;); and 1 more</p>`) {
		t.Errorf("report.html lacks the lead line")
	}

	clean := testInput()
	clean.Result.Findings, clean.Result.MapsDiffs = nil, nil
	md = string(pages(t, clean).Markdown)
	if !strings.Contains(md, "No findings") || strings.Contains(md, "raw/") || strings.Contains(md, "Lead:") {
		t.Errorf("a clean diff's report:\n%s", md)
	}
}

// A process named like a web address or a mail address is text in report.md,
// not a link a GitHub-flavoured viewer makes by itself.
func TestMarkdownBreaksAutolinks(t *testing.T) {
	for in, want := range map[string]string{
		"pid 7 (www.evil.io/pwn) maps it":   `pid 7 (www\.evil.io/pwn) maps it`,
		"WWW.evil.io":                       `WWW\.evil.io`,
		"see https://evil.io/x":             `see https\://evil.io/x`,
		"mail root@evil.io now":             `mail root\@evil.io now`,
		"inherited from 4242@987600 (exe)":  "inherited from 4242@987600 (exe)",
		"NVML was not read at FROM: reason": "NVML was not read at FROM: reason",
	} {
		if got := mdText(in); got != want {
			t.Errorf("mdText(%q) = %q, want %q", in, got, want)
		}
	}
}

// NVML's ECC errors and lost GPUs stand on the time line; an Xid stands
// there as its xid_error finding, not twice.
func TestTimelineGPUEvents(t *testing.T) {
	gi, ci := uint32(1), uint32(0)
	in := BundleInput{Events: &eventlog.ReadResult{Events: []eventlog.Event{
		{Time: ghostcase.T0, Kind: eventlog.KindGPUEvent, GPUEvent: eventlog.GPUEventECCDoubleBit, GPUUUID: "GPU-1", GPUInstanceID: &gi, ComputeInstanceID: &ci},
		{Time: ghostcase.T0.Add(time.Second), Kind: eventlog.KindGPUEvent, GPUEvent: eventlog.GPUEventXid, Xid: 79, GPUUUID: "GPU-0"},
		{Time: ghostcase.T0.Add(2 * time.Second), Kind: eventlog.KindLost, Note: "NVML's GPU events: nvml event wait: unknown error"},
	}}}
	var got []string
	for _, e := range watchEvents(in, nil) {
		got = append(got, e.What)
	}
	want := []string{"NVML: double-bit (uncorrectable) ECC error on GPU-1 (MIG GPU instance 1, compute instance 0)",
		"gpusnap watch: events lost (NVML's GPU events: nvml event wait: unknown error)"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("time line:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

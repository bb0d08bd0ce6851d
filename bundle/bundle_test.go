package bundle

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/snapshot"
)

func TestRoundTrip(t *testing.T) {
	in := testInput()
	in.SignKey = testKey()
	b := writeBundle(t, in)

	rep := verifyBytes(t, b, testKey().Public().(ed25519.PublicKey))
	if !rep.Intact() {
		t.Fatalf("fresh bundle not intact: %+v", rep.Problems)
	}
	if !rep.Signature.Valid || !rep.Signature.Trusted {
		t.Errorf("signature = %+v, want valid and trusted", rep.Signature)
	}
	var names []string
	for _, e := range rep.Entries {
		if e.Status != StatusOK {
			t.Errorf("%s: status %s", e.Name, e.Status)
		}
		names = append(names, e.Name)
	}
	want := []string{
		"bag-info.txt", "bagit.txt",
		"data/", "data/after.json", "data/before.json", "data/findings.json",
		"data/maps/", "data/maps/4243@987654.diff", "data/maps/666@990000.diff",
		"data/raw/", "data/raw/4243@987654/", "data/raw/4243@987654/cgroup", "data/raw/4243@987654/cmdline", "data/raw/4243@987654/maps", "data/raw/4243@987654/status",
		"data/raw/666@990000/", "data/raw/666@990000/cgroup", "data/raw/666@990000/cmdline", "data/raw/666@990000/maps", "data/raw/666@990000/status",
		"data/report.html", "data/report.md",
		"manifest-sha256.txt", "statement.dsse.json", "tagmanifest-sha256.txt",
	}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("entries:\n got %q\nwant %q", names, want)
	}
	if rep.Bag != "gpusnap-"+in.After.ID {
		t.Errorf("bag directory %q", rep.Bag)
	}

	m := rep.Predicate
	if m.GpusnapVersion != "1.0.0-test" || m.Tenant != "job-4242" || m.UID != 0 ||
		m.Host != (HostFacts{Hostname: "gpu-node-7", KernelRelease: "6.1.0-28-amd64", BootID: "b00710-1d", DriverVersion: "550.54.15"}) ||
		m.Before.ID != in.Before.ID || m.After.ID != in.After.ID || !m.After.CaptureStart.Equal(in.After.Host.CaptureStart) ||
		m.TenantStart == nil || !m.TenantStart.Equal(in.TenantStart) || m.Summary.Total != 4 ||
		m.FindingsSHA256 != sha256Hex(memberData(t, b, "data/findings.json")) {
		t.Errorf("predicate = %+v", m)
	}

	// The snapshots and the result come back as they went in.
	var before, after snapshot.Snapshot
	var res diff.Result
	for name, v := range map[string]any{"data/before.json": &before, "data/after.json": &after, "data/findings.json": &res} {
		if err := json.Unmarshal(memberData(t, b, name), v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if before.ID != in.Before.ID || len(after.Processes) != 3 || after.Processes[1].Raw.Maps != in.After.Processes[1].Raw.Maps {
		t.Errorf("snapshots did not round-trip")
	}
	if len(res.Findings) != 4 || res.Findings[1].InheritedFrom != in.Result.Findings[1].InheritedFrom || res.MapsDiffs["666@990000"] != in.Result.MapsDiffs["666@990000"] {
		t.Errorf("findings did not round-trip: %+v", res)
	}
	// raw/ keeps the kernel's bytes, even those JSON cannot carry.
	if got := memberData(t, b, "data/raw/666@990000/cmdline"); string(got) != in.After.Processes[2].Raw.Cmdline {
		t.Errorf("raw cmdline = %q", got)
	}
	// A raw text that is not UTF-8 keeps its bytes, in raw/ and through after.json.
	cgroup := in.After.Processes[2].Raw.Cgroup
	if !strings.Contains(cgroup, "\xff") || string(memberData(t, b, "data/raw/666@990000/cgroup")) != cgroup || after.Processes[2].Raw.Cgroup != cgroup {
		t.Errorf("raw cgroup not byte for byte: %q, after.json %q", memberData(t, b, "data/raw/666@990000/cgroup"), after.Processes[2].Raw.Cgroup)
	}
	if got := memberData(t, b, "data/maps/4243@987654.diff"); string(got) != in.Result.MapsDiffs["4243@987654"] {
		t.Errorf("maps diff = %q", got)
	}
}

func TestArchiveIsReproducible(t *testing.T) {
	for _, signed := range []bool{false, true} {
		in := testInput()
		if signed {
			in.SignKey = testKey()
		}
		a := writeBundle(t, in)
		// A second Input built afresh: equal values, not the same pointers.
		in2 := testInput()
		in2.SignKey = in.SignKey
		if b := writeBundle(t, in2); !bytes.Equal(a, b) {
			t.Errorf("signed=%v: two runs gave different bytes", signed)
		}
		// The statement's own times are UTC, whatever zone the snapshots were read in.
		in3 := testInput()
		in3.TenantStart = in3.TenantStart.In(time.FixedZone("UTC+5", 5*3600))
		if st := memberData(t, writeBundle(t, in3), FileStatement); !bytes.Contains(st, []byte(`"tenant_start":"2026-11-29T10:20:00Z"`)) {
			t.Errorf("signed=%v: statement times not in UTC:\n%s", signed, st)
		}
	}
}

func TestArchiveHeaders(t *testing.T) {
	b := writeBundle(t, testInput())
	if b[3] != 0 || !bytes.Equal(b[4:8], []byte{0, 0, 0, 0}) {
		t.Errorf("gzip header carries a name or time: % x", b[:10])
	}
	mtime := t0.Add(2*time.Hour + 90*time.Millisecond).Truncate(time.Second)
	for _, m := range readMembers(t, b) {
		h := m.hdr
		wantMode := int64(0o644)
		if strings.HasSuffix(h.Name, "/") {
			wantMode = 0o755
		}
		if h.Mode != wantMode || h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" || !h.ModTime.Equal(mtime) {
			t.Errorf("%s: mode %o uid %d gid %d uname %q gname %q mtime %v", h.Name, h.Mode, h.Uid, h.Gid, h.Uname, h.Gname, h.ModTime)
		}
	}
}

func TestWriteRefusesBadInput(t *testing.T) {
	in := testInput()
	in.Result = nil
	if _, err := Write(&bytes.Buffer{}, in); err == nil {
		t.Error("Write without a result succeeded")
	}
	in = testInput()
	in.Result.MapsDiffs["../../etc/passwd"] = "x"
	if _, err := Write(&bytes.Buffer{}, in); err == nil || !strings.Contains(err.Error(), "PID@START") {
		t.Errorf("Write with a path as a process key: %v", err)
	}
}

// extract writes the regular files of a bundle under dir, as tar would.
func extract(t *testing.T, b []byte, dir string) {
	t.Helper()
	for _, m := range readMembers(t, b) {
		p := filepath.Join(dir, filepath.FromSlash(m.hdr.Name))
		if strings.HasSuffix(m.hdr.Name, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(p, m.data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSha256sumChecksExtractedBundle(t *testing.T) {
	if _, err := exec.LookPath("sha256sum"); err != nil {
		t.Skip("sha256sum (coreutils) is not installed")
	}
	dir := t.TempDir()
	in := testInput()
	extract(t, writeBundle(t, in), dir)
	bag := filepath.Join(dir, DefaultName(in.After.ID))
	for _, manifest := range []string{FileManifest, FileTagManifest} {
		cmd := exec.Command("sha256sum", "--strict", "-c", manifest)
		cmd.Dir = bag
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("sha256sum -c %s: %v\n%s", manifest, err, out)
		}
		if !strings.Contains(string(out), "data/raw/666@990000/cmdline: OK") && !strings.Contains(string(out), "statement.intoto.json: OK") {
			t.Errorf("sha256sum -c %s did not check everything:\n%s", manifest, out)
		}
	}
	// And it fails on an altered file.
	if err := os.WriteFile(filepath.Join(bag, "data", "report.md"), []byte("edited"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sha256sum", "-c", FileManifest)
	cmd.Dir = bag
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "data/report.md: FAILED") {
		t.Errorf("sha256sum -c passed an edited report.md: %v\n%s", err, out)
	}
}

func TestReportsEscapeHostileStrings(t *testing.T) {
	b := writeBundle(t, testInput())
	md := memberData(t, b, "data/"+FileReportMD)
	html := memberData(t, b, "data/"+FileReportHTM)
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
	md := string(memberData(t, writeBundle(t, in), "data/"+FileReportMD))
	for _, want := range []string{
		"**4 findings: 3 high, 1 medium.**\n\n> Note: NVML was not read at FROM: library not found\n",
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

	clean := testInput()
	clean.Result.Findings, clean.Result.MapsDiffs = nil, nil
	md = string(memberData(t, writeBundle(t, clean), "data/"+FileReportMD))
	if !strings.Contains(md, "No findings") || strings.Contains(md, "raw/") {
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
	in := Input{Events: &eventlog.ReadResult{Events: []eventlog.Event{
		{Time: t0, Kind: eventlog.KindGPUEvent, GPUEvent: eventlog.GPUEventECCDoubleBit, GPUUUID: "GPU-1", GPUInstanceID: &gi, ComputeInstanceID: &ci},
		{Time: t0.Add(time.Second), Kind: eventlog.KindGPUEvent, GPUEvent: eventlog.GPUEventXid, Xid: 79, GPUUUID: "GPU-0"},
		{Time: t0.Add(2 * time.Second), Kind: eventlog.KindLost, Note: "NVML's GPU events: nvml event wait: unknown error"},
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

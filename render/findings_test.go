package render

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/snapshot"
)

var t1 = time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC)

// snap is a snapshot of one boot, NVML read from a fixture, taken at t1.
func snap(id string, procs ...snapshot.Process) *snapshot.Snapshot {
	return &snapshot.Snapshot{ID: id, Label: snapshot.LabelSnapshot, Processes: procs, NVML: snapshot.NVML{Source: "fixture:test"},
		Host: snapshot.Host{BootID: "boot-1", Hostname: "gpu-node-1", CaptureStart: t1}}
}

// hostile is a process whose comm, exe, cmdline and device path try to forge
// report lines and drive the terminal; it maps /dev/nvidia0 (195:0) rw-s.
func hostile() snapshot.Process {
	minor := 0
	m := snapshot.Mapping{Address: "7f0000000000-7f0000001000", Start: 0x7f0000000000, End: 0x7f0000001000, Size: 4096,
		Perms: "rw-s", Dev: "00:05", Inode: 1000, Path: "/dev/nvidia0\nleftover", DeviceNumber: snapshot.DeviceNumber{Major: 195},
		DeviceType: "char", Class: snapshot.ClassNVIDIA, GPUMinor: &minor}
	return snapshot.Process{PID: 666, StartTime: 1, PPID: 1, Comm: "x\n  HIGH\x1b[2J", Exe: "/tmp/evil\x1b]0;pwned\x07",
		UID: 1000, User: "bob", Cmdline: []string{"evil", "--opt=\x9b31m", "\xff"}, Mappings: []snapshot.Mapping{m},
		Raw: &snapshot.Raw{Maps: "7f0000000000-7f0000001000 rw-s 00000000 00:05 1 /dev/nvidia0\x1b[31m\n"}}
}

func resultText(t *testing.T, r *diff.Result) string {
	t.Helper()
	var b bytes.Buffer
	if err := ResultText(&b, r, true); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestTextReportIsTerminalSafe(t *testing.T) {
	from := snap("20261129-200000.000000-aaaaaa")
	to := snap("20261129-210000.000000-bbbbbb", hostile())
	to.Tenant = "job-42"
	to.Host.CaptureStart = t1.Add(time.Hour)
	out := resultText(t, diff.Compare(from, to, diff.Options{MapsDiff: true}))
	if strings.ContainsAny(out, "\x1b\x07\u009b") || !utf8.ValidString(out) {
		t.Errorf("report holds raw control bytes:\n%q", out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "  HIGH") || strings.HasPrefix(line, "leftover") {
			t.Errorf("a process string forged the report line %q", line)
		}
	}
	first, _, _ := strings.Cut(out, "\n")
	wantFirst := "gpusnap diff: 2 high, 0 medium, 0 low, 0 info; tenant job-42; from 20261129-200000.000000-aaaaaa (2026-11-29T20:00:00Z) to 20261129-210000.000000-bbbbbb (2026-11-29T21:00:00Z)"
	if first != wantFirst {
		t.Errorf("summary line:\n%s\nwant:\n%s", first, wantFirst)
	}
	for _, want := range []string{"\nHIGH\n", `/tmp/evil\x1b]0;pwned\x07`, `cmdline: evil --opt=\x9b31m \xff`, `comm "x\n  HIGH\x1b[2J" disagrees`,
		"maps diff of 666@1:\n--- 20261129-200000.000000-aaaaaa/666@1/maps\n", `+7f0000000000-7f0000001000 rw-s 00000000 00:05 1 /dev/nvidia0\x1b[31m`} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

// TestCleanReport: only a complete comparison with no findings says clean;
// one that could not compare everything says so instead.
func TestCleanReport(t *testing.T) {
	r := diff.Compare(snap("a"), snap("b"), diff.Options{})
	if out := resultText(t, r); !strings.HasPrefix(out, "gpusnap diff: clean: 0 high, 0 medium, 0 low, 0 info; from a (") {
		t.Errorf("clean report:\n%s", out)
	}
	r.Complete = false
	r.Notes = []string{"NVML was not read at FROM"}
	out := resultText(t, r)
	if !strings.HasPrefix(out, "gpusnap diff: no findings in what was compared, but not all was (see the notes): 0 high") ||
		!strings.Contains(out, "\nnote: NVML was not read at FROM\n") {
		t.Errorf("partial report:\n%s", out)
	}
}

// TestTextReportShowsTriage: the text report carries each finding's
// triage, as --json does: the class, the next step and the evidence that
// decided it, and the lead under the summary line, escaped like everything
// a process controls.
func TestTextReportShowsTriage(t *testing.T) {
	r := &diff.Result{Findings: []diff.Finding{{Kind: diff.KindLeftoverDeviceMapping, Severity: diff.High, Summary: "s",
		Process: &diff.ProcessRef{PID: 9, StartTime: 1, Comm: "py\x1b[2J"},
		Triage:  &diff.Triage{Class: diff.ClassLeftoverWorker, Why: []string{"reparented to PID 1\x1b[2J"}, Next: "kill -9 9", Owner: "user bob"}}}}
	out := resultText(t, r)
	if lines := strings.Split(out, "\n"); len(lines) < 2 || lines[1] != `lead: leftover_worker: pid 9 (py\x1b[2J), owner user bob` {
		t.Errorf("text report's lead:\n%s", out)
	}
	if !strings.Contains(out, "triage: leftover_worker; next: kill -9 9\n") || !strings.Contains(out, "why: reparented to PID 1") ||
		strings.Contains(out, "\x1b") {
		t.Errorf("text report:\n%s", out)
	}
}

// TestCheckText: a check's report names what it checked and what it could
// not, and an orphan NVML lists is a PID with no process behind it.
func TestCheckText(t *testing.T) {
	r := &diff.Result{To: "b", ToTime: t1, Check: &diff.CheckScope{GPUs: "0,GPU-9", Unchecked: []string{"GPU-9: NVML was not read\x1b[2J"}, Verdict: diff.VerdictNotClean},
		Findings: []diff.Finding{{Kind: diff.KindOrphanGPUProcess, Severity: diff.High, Summary: "NVML lists PID 7777", Process: &diff.ProcessRef{PID: 7777, UID: -1}}},
		Summary:  diff.Summary{Total: 1, BySeverity: map[string]int{"high": 1}}}
	out := resultText(t, r)
	want := "gpusnap check: not clean: 1 high, 0 medium, 0 low, 0 info; GPUs 0,GPU-9; at 2026-11-29T20:00:00Z\n" +
		"lead: orphan_gpu_process: pid 7777\n" +
		"unchecked: GPU-9: NVML was not read\\x1b[2J\n\nHIGH\n" +
		"  orphan_gpu_process: NVML lists PID 7777\n    process: pid 7777, no process behind it\n"
	if out != want {
		t.Errorf("check report:\n%s\nwant:\n%s", out, want)
	}
}

// TestEvidenceCut: the text report shows the first evidence lines of a
// finding and counts the rest, which --json holds.
func TestEvidenceCut(t *testing.T) {
	f := diff.Finding{Kind: diff.KindOtherDeviceMapping, Severity: diff.Low, Summary: "s"}
	for i := range textEvidenceLines + 5 {
		f.Evidence = append(f.Evidence, "line "+strings.Repeat("x", i))
	}
	out := resultText(t, &diff.Result{Findings: []diff.Finding{f}})
	if n := strings.Count(out, "      line "); n != textEvidenceLines || !strings.Contains(out, "... 5 more evidence lines (--json has them all)\n") {
		t.Errorf("%d evidence lines:\n%s", n, out)
	}
}

// TestJSON: --json's output is the value indented by two spaces and one
// newline, as encoding/json indents it.
func TestJSON(t *testing.T) {
	r := diff.Compare(snap("a"), snap("b", hostile()), diff.Options{})
	var b bytes.Buffer
	if err := JSON(&b, r); err != nil {
		t.Fatal(err)
	}
	want, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.Bytes(), append(want, '\n')) {
		t.Errorf("JSON:\n%s\nwant:\n%s", b.Bytes(), want)
	}
}

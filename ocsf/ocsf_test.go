package ocsf

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/capture"
	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/internal/scenariodir"
	"github.com/gpusnap/gpusnap/internal/testenv"
	"github.com/gpusnap/gpusnap/nvmlread"
	"github.com/gpusnap/gpusnap/snapshot"
)

var fixedTime = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// capture reads a fixture host: a proc root and an NVML fixture.
func captureOf(t *testing.T, proc, nvml string) *snapshot.Snapshot {
	t.Helper()
	s, err := capture.Capture(context.Background(), capture.Options{ProcRoot: proc, NVML: nvmlread.Options{FixturePath: nvml}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func render(t *testing.T, fs []Finding) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := Write(&b, fs); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

const (
	gpuhost       = "../fixtures/proc/gpuhost"
	h100x8        = "../fixtures/nvml/h100x8.json"
	ghostScenario = "../fixtures/scenarios/leftover-ghost-in-container"
)

// Every finding of a check on the gpuhost fixture (a masquerading miner,
// pods, containers, zombie memory) and of a diff of a container's ghost is
// a valid Detection Finding, with its process, device and GPU.
func TestFindingsValidateAgainstSchema(t *testing.T) {
	snap := captureOf(t, gpuhost, h100x8)
	r := diff.Check(snap, diff.CheckOptions{ZombieThreshold: diff.DefaultZombieThreshold})
	if len(r.Findings) < 5 {
		t.Fatalf("check found %d findings on gpuhost", len(r.Findings))
	}
	out := render(t, FromResult(r, Source{Host: snap.Host.Hostname, Version: "1.2.3", Command: "check"}))
	got := validateLines(t, out)
	if len(got) != len(r.Findings) {
		t.Fatalf("%d lines for %d findings", len(got), len(r.Findings))
	}
	var miner map[string]any
	for _, f := range got {
		ev := f["evidences"].([]any)[0].(map[string]any)
		if p, ok := ev["process"].(map[string]any); ok && p["pid"] == float64(5000) && strings.Contains(f["message"].(string), "/dev/nvidia1") {
			miner = f
		}
	}
	if miner == nil {
		t.Fatal("no finding of process 5000")
	}
	text, _ := json.Marshal(miner)
	for _, want := range []string{`"severity":"Critical"`, `"disposition":"Alert"`, `"is_alert":true`, `"profiles":["security_control"]`, `"class":"suspected_compromise"`, `"path":"/tmp/.x/miner"`, `"path":"/dev/nvidia1"`, `"uid":"GPU-4a5b6c7d-1e2f-4a3b-8c4d-5e6f7a8b9c0d"`,
		`"type":"Kubernetes Pod","uid":"1a2b3c4d-5e6f-7a8b-9c0d-112233445566"`, `"type":"Container"`, `"name":"gpusnap","vendor_name":"gpusnap","version":"1.2.3"`,
		`"uid":"1001"`, `"log_name":"gpusnap check"`, `"title":"GPU in use before it is handed out"`, `"types":["gpu_in_use"]`, `"cmd_line":"python3 --pool stratum+tcp://pool.example:3333`} {
		if !strings.Contains(string(text), want) {
			t.Errorf("process 5000's finding lacks %s:\n%s", want, text)
		}
	}
	if bytes.ContainsAny(out, "\u202e\x1b") {
		t.Errorf("a tenant's control or bidi bytes went out raw")
	}

	ghost := scenariodir.ForTest(t, ghostScenario) + "/"
	from, to := captureOf(t, ghost+"before/proc", ghost+"before/nvml.json"), captureOf(t, ghost+"after/proc", ghost+"after/nvml.json")
	d := diff.Compare(from, to, diff.Options{ZombieThreshold: diff.DefaultZombieThreshold})
	if len(d.Findings) == 0 {
		t.Fatal("the ghost scenario found nothing")
	}
	validateLines(t, render(t, FromResult(d, Source{Host: to.Host.Hostname, Version: "1.2.3", Command: "diff"})))
}

// What the operator must do decides the handling: another team's job is
// logged, low and no alert whatever its findings' severities, a suspected
// compromise critical and an alert, an allowed finding allowed, and every
// line is valid under the security_control profile it names.
func TestHandlingByClass(t *testing.T) {
	other := scenariodir.ForTest(t, "../fixtures/scenarios/mps-server-another-tenant") + "/"
	from, to := captureOf(t, other+"before/proc", other+"before/nvml.json"), captureOf(t, other+"after/proc", other+"after/nvml.json")
	to.Tenant = "mps-server-another-tenant"
	d := diff.Compare(from, to, diff.Options{ZombieThreshold: diff.DefaultZombieThreshold})
	var tenants int
	for i, f := range validateLines(t, render(t, FromResult(d, Source{Host: "h", Version: "1", Command: "diff"}))) {
		if tr := d.Findings[i].Triage; tr == nil || tr.Class != diff.ClassAnotherTenant {
			continue
		}
		tenants++
		if d.Findings[i].Severity < diff.Medium || f["severity"] != "Low" || f["disposition"] != "Logged" || f["is_alert"] != false {
			t.Errorf("another team's %s finding (%s): severity %v, disposition %v, is_alert %v; want Low, Logged, false",
				d.Findings[i].Kind, d.Findings[i].Severity, f["severity"], f["disposition"], f["is_alert"])
		}
	}
	if tenants == 0 {
		t.Fatalf("no another_tenant finding in the scenario: %+v", d.Findings)
	}
	for _, c := range []struct {
		f           diff.Finding
		sev         diff.Severity
		disposition int
		alert       bool
	}{
		{diff.Finding{Severity: diff.Medium, Triage: &diff.Triage{Class: diff.ClassSuspectedCompromise}}, diff.Critical, dispositionAlert, true},
		{diff.Finding{Severity: diff.High, Triage: &diff.Triage{Class: diff.ClassAnotherTenant}}, diff.Low, dispositionLogged, false},
		{diff.Finding{Severity: diff.Info, Allowed: "exe=/usr/bin/x", Triage: &diff.Triage{Class: diff.ClassExpected}}, diff.Info, dispositionAllowed, false},
		{diff.Finding{Severity: diff.High, Triage: &diff.Triage{Class: diff.ClassLeftoverWorker}}, diff.High, dispositionAlert, true},
		{diff.Finding{Severity: diff.High}, diff.High, dispositionAlert, true},
		{diff.Finding{Severity: diff.Low}, diff.Low, dispositionDetected, false},
	} {
		if h := handlingOf(&c.f); h != (handling{c.sev, c.disposition, c.alert}) {
			t.Errorf("%s %+v: %+v, want %v %d %v", c.f.Severity, c.f.Triage, h, c.sev, c.disposition, c.alert)
		}
	}
}

// The same host, kind, process and device give the same finding_info.uid in
// every run; another host or process gives another.
func TestFindingUIDStable(t *testing.T) {
	uids := func(host string) map[string]string {
		r := diff.Check(captureOf(t, gpuhost, h100x8), diff.CheckOptions{ZombieThreshold: diff.DefaultZombieThreshold})
		out := map[string]string{}
		for _, f := range FromResult(r, Source{Host: host, Version: "v", Command: "check"}) {
			out[f.Message] = f.FindingInfo.UID
		}
		return out
	}
	a, b, other := uids("node-1"), uids("node-1"), uids("node-2")
	seen := map[string]bool{}
	for msg, uid := range a {
		if b[msg] != uid {
			t.Errorf("%q: uid %s, then %s", msg, uid, b[msg])
		}
		if other[msg] == uid {
			t.Errorf("%q: the same uid on another host", msg)
		}
		if seen[uid] {
			t.Errorf("uid %s names two findings", uid)
		}
		seen[uid] = true
	}
}

// watch's events render as Detection Findings too: an open, a mapping, an
// Xid the driver raised.
func TestEventsValidateAgainstSchema(t *testing.T) {
	minor := 0
	p := &eventlog.Process{PID: 4711, StartTime: 99, Comm: "python3", Exe: "/usr/bin/python3.11", UID: 1000, PodUID: "1a2b3c4d-5e6f-7a8b-9c0d-112233445566"}
	dev := &eventlog.Device{Path: "/dev/nvidia0", Number: "195:0", Type: "char", Class: "nvidia", GPU: &minor}
	evs := []eventlog.Event{
		{Time: fixedTime, Kind: eventlog.KindWatchStart, Mode: "tracepoint"},
		{Time: fixedTime, Kind: eventlog.KindOpen, Source: eventlog.SourceTracepoint, Process: p, Device: dev, Access: "rw"},
		{Time: fixedTime.Add(time.Millisecond), Kind: eventlog.KindMmap, Process: p, Device: dev, Perms: "rw-s", Length: 1 << 21},
		{Time: fixedTime.Add(time.Second), Kind: eventlog.KindAlive},
		{Time: fixedTime.Add(2 * time.Second), Kind: eventlog.KindGPUEvent, GPUUUID: "GPU-3f2a1c0e-8d4b-4e5f-9a1b-2c3d4e5f6071", GPUEvent: eventlog.GPUEventXid, Xid: 79},
	}
	fs := FromEvents(evs, Source{Host: "node-1", Version: "v", Command: "events"}, func(e *eventlog.Event) string { return e.Kind })
	got := validateLines(t, render(t, fs))
	if len(got) != 4 {
		t.Fatalf("%d findings of 5 events (one heartbeat)", len(got))
	}
	if got[3]["severity"] != "High" || got[1]["evidences"].([]any)[0].(map[string]any)["file"].(map[string]any)["type"] != "Character Device" {
		t.Errorf("Xid %v, open's device %v", got[3]["severity"], got[1]["evidences"])
	}
}

func sample(n int) []Finding {
	fs := make([]Finding, n)
	for i := range fs {
		fs[i] = newFinding(Source{Host: "h", Version: "v", Command: "diff"}, "k", strings.Repeat("x", 5000), diff.High, fixedTime, "1@2", "/dev/nvidia0", "")
	}
	return fs
}

// Batches appended at once by many writers land whole: every line one
// finding, no batch split by another.
func TestAppendWholeBatches(t *testing.T) {
	path := filepath.Join(t.TempDir(), "findings.jsonl")
	const writers, batches, per = 8, 20, 7
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range batches {
				fs := sample(per)
				for i := range fs {
					fs[i].Metadata.CorrelationUID = string(rune('a' + w))
				}
				if err := Append(path, fs); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	n, run, last := 0, 0, ""
	for sc.Scan() {
		var v Finding
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("line %d: %v", n+1, err)
		}
		if c := v.Metadata.CorrelationUID; c != last {
			if run%per != 0 {
				t.Fatalf("line %d: a batch of %s cut after %d lines", n+1, last, run)
			}
			last, run = c, 0
		}
		run++
		n++
	}
	if n != writers*batches*per {
		t.Errorf("%d lines, want %d", n, writers*batches*per)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", fi.Mode())
	}
}

// Append never writes through a symbolic link nor to a FIFO, and a full
// disk leaves the file as it was, with no torn line.
func TestAppendRefusesAndCutsBack(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{link, fifo} {
		if err := Append(p, sample(1)); err == nil {
			t.Errorf("%s: appended", p)
		}
	}
	if fi, _ := os.Stat(target); fi.Size() != 0 {
		t.Errorf("wrote through the link: %d bytes", fi.Size())
	}

	testenv.Root(t, "a full disk needs a small tmpfs")
	small := t.TempDir()
	if err := syscall.Mount("tmpfs", small, "tmpfs", 0, "size=64k"); err != nil {
		t.Skipf("mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(small, syscall.MNT_DETACH) })
	path := filepath.Join(small, "findings.jsonl")
	if err := Append(path, sample(2)); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	if err := Append(path, sample(40)); err == nil {
		t.Fatal("200 KB appended to a 64 KB tmpfs")
	}
	after, _ := os.ReadFile(path)
	if !bytes.Equal(before, after) {
		t.Errorf("a failed append left %d bytes, not the %d before it", len(after), len(before))
	}
}

// A finding's process carries its executable's SHA-256 where the capture
// hashed it: the evidence's file has it as an OCSF fingerprint, and the line
// still validates against class 2004.
func TestFindingCarriesExeHash(t *testing.T) {
	snap := captureOf(t, gpuhost, h100x8)
	r := diff.Check(snap, diff.CheckOptions{ZombieThreshold: diff.DefaultZombieThreshold})
	const sha = "41e89962581eb54c08903910a273dd18039f207c5d8d1bd51a243f40d97a0abb"
	hashed := 0
	for i := range r.Findings {
		if p := r.Findings[i].Process; p != nil && p.Exe != "" {
			p.ExeSHA256 = sha
			hashed++
		}
	}
	if hashed == 0 {
		t.Fatal("no finding with an executable on gpuhost")
	}
	out := render(t, FromResult(r, Source{Host: snap.Host.Hostname, Version: "1.2.3", Command: "check"}))
	validateLines(t, out)
	if n := bytes.Count(out, []byte(`{"algorithm_id":3,"algorithm":"SHA-256","value":"`+sha+`"}`)); n != hashed {
		t.Errorf("%d SHA-256 fingerprints for %d hashed processes:\n%s", n, hashed, out)
	}
}

package diff

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/snapshot"
)

func TestSortAndSummary(t *testing.T) {
	fs := []Finding{
		{Kind: KindOtherDeviceMapping, Severity: Low, Process: &ProcessRef{PID: 5}, Device: "/dev/b"},
		{Kind: KindLeftoverDeviceMapping, Severity: High, Process: &ProcessRef{PID: 9}, Device: "/dev/nvidia0"},
		{Kind: KindLeftoverDeviceHolder, Severity: High, Process: &ProcessRef{PID: 9}, Device: "/dev/nvidia0"},
		{Kind: KindOtherDeviceMapping, Severity: Low, Process: &ProcessRef{PID: 5}, Device: "/dev/a"},
		{Kind: KindLeftoverDeviceMapping, Severity: High, Process: &ProcessRef{PID: 3}, Device: "/dev/nvidia1"},
		{Kind: KindZombieGPUMemory, Severity: High, GPUUUID: "GPU-1"},
		{Kind: KindZombieGPUMemory, Severity: High, GPUUUID: "GPU-0"},
		{Kind: KindUnexpectedGPUProcess, Severity: Info, Process: &ProcessRef{PID: 1}, Allowed: "x:1: exe=*"},
	}
	sortFindings(fs)
	var order []string
	for _, f := range fs {
		order = append(order, f.Kind+" "+f.Severity.String()+" "+f.Device+f.GPUUUID)
	}
	want := []string{
		"leftover_device_holder high /dev/nvidia0",
		"leftover_device_mapping high /dev/nvidia1",
		"leftover_device_mapping high /dev/nvidia0",
		"zombie_gpu_memory high GPU-0",
		"zombie_gpu_memory high GPU-1",
		"other_device_mapping low /dev/a",
		"other_device_mapping low /dev/b",
		"unexpected_gpu_process info ",
	}
	if strings.Join(order, "\n") != strings.Join(want, "\n") {
		t.Errorf("order:\n%s\nwant:\n%s", strings.Join(order, "\n"), strings.Join(want, "\n"))
	}
	s := summarize(fs)
	if s.Total != 8 || s.Worst != "high" || s.Allowed != 1 || s.BySeverity["high"] != 5 || s.BySeverity["low"] != 2 ||
		s.BySeverity["critical"] != 0 || len(s.BySeverity) != 5 {
		t.Errorf("summary = %+v", s)
	}
	if s := summarize(nil); s.Worst != "" || s.Total != 0 || s.BySeverity["medium"] != 0 {
		t.Errorf("empty summary = %+v", s)
	}
}

func TestFailed(t *testing.T) {
	r := &Result{Findings: []Finding{{Severity: Medium}, {Severity: Info}}}
	for sev, want := range map[Severity]bool{Info: true, Low: true, Medium: true, High: false, Critical: false} {
		if got := r.Failed(sev); got != want {
			t.Errorf("Failed(%s) = %v, want %v", sev, got, want)
		}
	}
	if (&Result{}).Failed(Info) {
		t.Error("an empty result failed")
	}
}

// hostile is a process whose comm, exe, cmdline and device path try to forge
// report lines and drive the terminal.
func hostile() snapshot.Process {
	p := proc(666, 1, "x\n  HIGH\x1b[2J", "/tmp/evil\x1b]0;pwned\x07",
		mapping("/dev/nvidia0\nleftover", "rw-s", 0x7f0000000000, pageLen, 0, dev0No),
		rawMapsText("7f0000000000-7f0000001000 rw-s 00000000 00:05 1 /dev/nvidia0\x1b[31m\n"))
	p.Cmdline = []string{"evil", "--opt=\x9b31m", "\xff"}
	return p
}

// TestResultJSON holds that a result's JSON holds docs/spec.md's (JSON)
// fields, a hostile process's among them.
func TestResultJSON(t *testing.T) {
	to := snap("b", hostile())
	to.Tenant = "job-42"
	b, err := json.Marshal(Compare(snap("a"), to, Options{}))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		From, To, Tenant string
		Findings         []map[string]any
		Summary          map[string]any
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if doc.From != "a" || doc.To != "b" || doc.Tenant != "job-42" || len(doc.Findings) != 2 || doc.Summary["worst"] != "high" {
		t.Fatalf("json = %+v", doc)
	}
	f := doc.Findings[0]
	for _, k := range []string{"kind", "severity", "summary", "process", "device", "evidence"} {
		if _, ok := f[k]; !ok {
			t.Errorf("finding lacks %q: %v", k, f)
		}
	}
	p := f["process"].(map[string]any)
	for _, k := range []string{"pid", "start_time", "comm", "exe", "uid", "user"} {
		if _, ok := p[k]; !ok {
			t.Errorf("process lacks %q: %v", k, p)
		}
	}
}

func TestMapsDiffsOfInvolvedProcesses(t *testing.T) {
	base := "55d000000000-55d000001000 r--p 00000000 fe:00 1 /usr/bin/python3.11\n"
	before := proc(300, 10, "python3", "/usr/bin/python3.11", rawMapsText(base))
	after := proc(300, 10, "python3", "/usr/bin/python3.11",
		mapping(dev0, "rw-s", 0x7f0000000000, pageLen, 0, dev0No), rawMapsText(base+devLine))
	quiet := proc(400, 10, "bash", "/usr/bin/bash", rawMapsText(base))
	r := Compare(snap("a", before, quiet), snap("b", after, quiet), Options{MapsDiff: true})
	want := "--- a/300@10/maps\n+++ b/300@10/maps\n@@ -1 +1,2 @@\n " + base + "+" + devLine
	if len(r.MapsDiffs) != 1 || r.MapsDiffs["300@10"] != want {
		t.Errorf("maps diffs = %q, want only 300@10:\n%s", r.MapsDiffs, want)
	}
	if r := Compare(snap("a", before), snap("b", after), Options{}); r.MapsDiffs != nil {
		t.Error("maps diffs without --maps-diff")
	}
}

// spec.md's (JSON) fields are in every object, empty where unknown, as for
// an orphan nobody had, in a diff of snapshots that name no tenant.
func TestJSONFieldsAlwaysWritten(t *testing.T) {
	r := compare(withGPUs(snap("a"), gpu(0)), withGPUs(snap("b"), gpu(0, gp(7777, 0))))
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"from", "to", "tenant", "findings", "summary"} {
		if _, ok := doc[k]; !ok {
			t.Errorf("result lacks %q: %s", k, b)
		}
	}
	p := doc["findings"].([]any)[0].(map[string]any)["process"].(map[string]any)
	for _, k := range []string{"pid", "start_time", "comm", "exe", "uid", "user", "cgroup", "container_id"} {
		if _, ok := p[k]; !ok {
			t.Errorf("process lacks %q: %v", k, p)
		}
	}
}

// A survivor that used no NVIDIA device at FROM has no maps text kept there.
// Its maps diff is of the device mappings of both ends, not its whole maps
// shown as new.
func TestMapsDiffOfASurvivorWithoutTextAtFrom(t *testing.T) {
	base := "55d000000000-55d000001000 r--p 00000000 fe:00 1 /usr/sbin/sshd\n"
	before := proc(1502, 10, "sshd", "/usr/sbin/sshd", mapping("/dev/dri/card0", "rw-s", 0x7e0000000000, pageLen, 0, ""))
	after := proc(1502, 10, "sshd", "/usr/sbin/sshd", mapping(dev0, "rw-s", 0x7f0000000000, pageLen, 0, dev0No),
		mapping("/dev/dri/card0", "rw-s", 0x7e0000000000, pageLen, 0, ""), rawMapsText(base+devLine))
	r := Compare(snap("a", before), snap("b", after), Options{MapsDiff: true})
	want := "--- a/1502@10/device-mappings\n+++ b/1502@10/device-mappings\n@@ -1 +1,2 @@\n" +
		" 7e0000000000-7e0000001000 rw-s 00000000 00:05 1000 /dev/dri/card0\n" +
		"+7f0000000000-7f0000001000 rw-s 00000000 00:05 1000 /dev/nvidia0\n"
	if got := r.MapsDiffs["1502@10"]; got != want {
		t.Errorf("maps diff:\n%s\nwant:\n%s", got, want)
	}
}

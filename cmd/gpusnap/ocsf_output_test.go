package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ocsfLines decodes JSON lines, each an OCSF Detection Finding.
func ocsfLines(t *testing.T, text string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		var v map[string]any
		if err := json.Unmarshal([]byte(line), &v); err != nil || v["class_uid"] != float64(2004) {
			t.Fatalf("not a Detection Finding (%v): %s", err, line)
		}
		out = append(out, v)
	}
	return out
}

// check --format ocsf prints one finding a line, with check's exit status;
// --ocsf-file appends the same lines on every run.
func TestCheckFormatOCSF(t *testing.T) {
	file := filepath.Join(t.TempDir(), "findings.jsonl")
	args := []string{"check", "--proc-root", psFixture, "--nvml-fixture", nvmlFixture("h100x8.json"), "--format", "ocsf", "--ocsf-file", file}
	code, out, stderr := runCLI(t, args...)
	if code != 1 {
		t.Fatalf("check: exit %d: %s", code, stderr)
	}
	printed := ocsfLines(t, out)
	// Text on stdout, the file appended to.
	code, out, stderr = runCLI(t, append(args[:len(args)-4:len(args)-4], "--ocsf-file", file)...)
	if code != 1 || !strings.HasPrefix(out, "gpusnap check: ") {
		t.Fatalf("check with the file: exit %d: %s\n%s", code, stderr, out)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	appended := ocsfLines(t, string(data))
	if len(appended) != 2*len(printed) {
		t.Fatalf("%d lines appended by two runs of %d findings", len(appended), len(printed))
	}
	for i, p := range printed {
		a, b := appended[i]["finding_info"].(map[string]any), appended[len(printed)+i]["finding_info"].(map[string]any)
		if p["finding_info"].(map[string]any)["uid"] != a["uid"] || a["uid"] != b["uid"] {
			t.Errorf("finding %d: uids %v, %v, %v across runs", i, p["finding_info"], a["uid"], b["uid"])
		}
	}
}

// diff --tenant --format ocsf: a container's ghost, tagged with the tenant.
func TestDiffFormatOCSF(t *testing.T) {
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	dir := scenarioDir("leftover-ghost-in-container") + "/"
	at := func(when string) []string {
		return []string{"--db", db, "--proc-root", dir + when + "/proc", "--nvml-fixture", dir + when + "/nvml.json"}
	}
	if code, _, stderr := gpusnap(t, append(at("before"), "baseline", "--tenant", "job-7")...); code != 0 {
		t.Fatalf("baseline: exit %d: %s", code, stderr)
	}
	code, out, stderr := gpusnap(t, append(at("after"), "diff", "--tenant", "job-7", "--format", "ocsf")...)
	if code != 1 {
		t.Fatalf("diff: exit %d: %s", code, stderr)
	}
	for _, f := range ocsfLines(t, out) {
		if m := f["metadata"].(map[string]any); m["tenant_uid"] != "job-7" || m["log_name"] != "gpusnap diff" {
			t.Errorf("metadata %v", m)
		}
	}
}

// --format takes text or ocsf, and ocsf excludes --json and --npd.
func TestFormatOCSFUsage(t *testing.T) {
	for _, args := range [][]string{
		{"check", "--format", "xml"},
		{"check", "--format", "ocsf", "--json"},
		{"--json", "diff", "--tenant", "t", "--format", "ocsf"},
		{"check", "--npd", "--format", "ocsf"},
		{"events", "--format", "ocsf", "--ocsf-file", ""},
	} {
		if code, _, stderr := runCLI(t, args...); code != 2 || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%q: exit %d, stderr %q", args, code, stderr)
		}
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/diff"
)

// gpusnap runs the CLI in-process with exactly the arguments given.
func gpusnap(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), append([]string{"gpusnap"}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

// expectedFinding is one line of a scenario's expected.json.
type expectedFinding struct {
	Kind     string `json:"kind"`
	Severity string `json:"severity"`
	PID      int    `json:"pid"`
}

func (f expectedFinding) String() string {
	b, _ := json.Marshal(f)
	return string(b)
}

// TestDiffScenarios walks fixtures/scenarios through the CLI: baseline of the
// before proc root and NVML fixture, then diff --tenant of the after ones. The
// findings (kind, severity, pid) must be expected.json's, and nothing else;
// the exit status 1 exactly when one is at or above medium.
func TestDiffScenarios(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join("..", "..", "fixtures", "scenarios", "*", "expected.json"))
	if err != nil || len(dirs) < 10 {
		t.Fatalf("scenarios: %v (%d found)", err, len(dirs))
	}
	for _, exp := range dirs {
		dir := filepath.Dir(exp)
		name := filepath.Base(dir)
		t.Run(name, func(t *testing.T) {
			var want struct{ Findings []expectedFinding }
			data, err := os.ReadFile(exp)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(data, &want); err != nil {
				t.Fatalf("%s: %v", exp, err)
			}
			db := filepath.Join(t.TempDir(), "gpusnap.db")
			side := func(s string) []string {
				return []string{"--db", db, "--tenant", name,
					"--proc-root", filepath.Join(dir, s, "proc"), "--nvml-fixture", filepath.Join(dir, s, "nvml.json")}
			}
			if code, _, stderr := gpusnap(t, append([]string{"baseline"}, side("before")...)...); code != 0 {
				t.Fatalf("baseline: exit %d: %s", code, stderr)
			}
			args := append([]string{"diff", "--json"}, side("after")...)
			if _, err := os.Stat(filepath.Join(dir, "allow")); err == nil {
				args = append(args, "--allow", filepath.Join(dir, "allow"))
			}
			code, stdout, stderr := gpusnap(t, args...)
			var r diff.Result
			if err := json.Unmarshal([]byte(stdout), &r); err != nil {
				t.Fatalf("diff --json: exit %d, %v: %s %s", code, err, stdout, stderr)
			}
			var got []expectedFinding
			for _, f := range r.Findings {
				e := expectedFinding{Kind: f.Kind, Severity: f.Severity.String()}
				if f.Process != nil {
					e.PID = f.Process.PID
				}
				got = append(got, e)
			}
			key := func(a, b expectedFinding) int { return strings.Compare(a.String(), b.String()) }
			slices.SortFunc(got, key)
			slices.SortFunc(want.Findings, key)
			if !slices.Equal(got, want.Findings) {
				t.Errorf("findings:\n  %v\nwant:\n  %v\nreport:\n%s", got, want.Findings, stdout)
			}
			wantCode := 0
			for _, f := range want.Findings {
				if sev, _ := diff.ParseSeverity(f.Severity); sev >= diff.Medium {
					wantCode = 1
				}
			}
			if code != wantCode {
				t.Errorf("exit %d, want %d; stderr: %s", code, wantCode, stderr)
			}
			if r.Tenant != name || r.Summary.Total != len(want.Findings) {
				t.Errorf("tenant %q, total %d", r.Tenant, r.Summary.Total)
			}
		})
	}
}

package main

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpusnap/gpusnap/internal/livetest"
)

// readTextfile parses a textfile as node_exporter's collector does.
func readTextfile(t *testing.T, path string) map[string]*dto.MetricFamily {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return parseMetrics(t, path, f)
}

// parseMetrics parses Prometheus' text format as a scrape does.
func parseMetrics(t *testing.T, what string, r io.Reader) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return fams
}

// series is the value of the series of a family with these labels (and
// maybe more), and whether there is one.
func series(fams map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	fam := fams[name]
	if fam == nil {
		return 0, false
	}
next:
	for _, m := range fam.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if have[k] != v {
				continue next
			}
		}
		return m.GetGauge().GetValue(), true
	}
	return 0, false
}

func TestDiffTextfile(t *testing.T) {
	const name = "cuda-ghost-keeps-context"
	dir := t.TempDir()
	db, prom := filepath.Join(dir, "gpusnap.db"), filepath.Join(dir, "gpusnap.prom")
	if code, _, stderr := gpusnap(t, append([]string{"baseline", "--tenant", "job-1"}, sideArgs(db, name, "before")...)...); code != exitClean {
		t.Fatalf("baseline: exit %d: %s", code, stderr)
	}
	diffArgs := append([]string{"diff", "--tenant", "job-1"}, sideArgs(db, name, "after")...)
	code, stdout, stderr := gpusnap(t, append(diffArgs, "--textfile", prom)...)
	if code != exitFindings || !strings.Contains(stdout, "orphan_gpu_process") {
		t.Fatalf("diff --textfile: exit %d (want 1): %s %s", code, stdout, stderr)
	}
	fams := readTextfile(t, prom)
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"gpusnap_findings", map[string]string{"command": "diff", "kind": "leftover_device_holder", "severity": "high"}, 3},
		{"gpusnap_findings", map[string]string{"command": "diff", "kind": "zombie_gpu_memory", "severity": "high"}, 1},
		{"gpusnap_findings", map[string]string{"command": "diff", "kind": "unexpected_gpu_process", "severity": "medium"}, 1},
		// All 3,298,820,096 used past the driver's 566,231,040 reserve:
		// NVML lists it under 664, which is gone.
		{"gpusnap_gpu_unaccounted_memory_bytes", map[string]string{"command": "diff", "gpu_uuid": "GPU-3f2a6b1c-0d4e-4f5a-8b9c-1d2e3f4a5b6c"}, 3298820096 - 566231040},
		{"gpusnap_last_run_verdict", map[string]string{"command": "diff", "verdict": "findings"}, 1},
		{"gpusnap_last_run_verdict", map[string]string{"command": "diff", "verdict": "clean"}, 0},
		{"gpusnap_build_info", map[string]string{"command": "diff", "version": buildVersion()}, 1},
	} {
		if got, ok := series(fams, c.name, c.labels); !ok || got != c.want {
			t.Errorf("%s%v = %v (present %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	for _, l := range fams["gpusnap_findings"].Metric[0].Label {
		if n := l.GetName(); n != "command" && n != "kind" && n != "severity" && n != "class" {
			t.Errorf("gpusnap_findings has a label %q: no per-process labels", n)
		}
	}

	// A textfile that cannot be written: beside findings, one more line on
	// stderr and the exit status of the findings.
	bad := filepath.Join(dir, "missing", "gpusnap.prom")
	code, _, stderr = gpusnap(t, append(diffArgs, "--textfile", bad)...)
	if code != exitFindings || !strings.Contains(stderr, "gpusnap: textfile "+bad) {
		t.Errorf("findings, textfile unwritable: exit %d (want 1), stderr %q", code, stderr)
	}
}

func TestDiffTextfileCleanAndError(t *testing.T) {
	const name = "clean-persistenced-unchanged"
	dir := t.TempDir()
	db, prom := filepath.Join(dir, "gpusnap.db"), filepath.Join(dir, "gpusnap.prom")

	// No baseline: the error is recorded, so a fleet sees a node whose gpusnap could not say.
	code, _, stderr := gpusnap(t, append([]string{"diff", "--tenant", "job-2", "--textfile", prom}, sideArgs(db, name, "after")...)...)
	if code != exitError || !strings.Contains(stderr, "baseline") {
		t.Fatalf("diff without baseline: exit %d: %s", code, stderr)
	}
	if v, ok := series(readTextfile(t, prom), "gpusnap_last_run_verdict", map[string]string{"verdict": "error"}); !ok || v != 1 {
		t.Errorf("verdict error = %v (present %v), want 1", v, ok)
	}

	if code, _, stderr := gpusnap(t, append([]string{"baseline", "--tenant", "job-2"}, sideArgs(db, name, "before")...)...); code != exitClean {
		t.Fatalf("baseline: exit %d: %s", code, stderr)
	}
	diffArgs := append([]string{"diff", "--tenant", "job-2"}, sideArgs(db, name, "after")...)
	if code, stdout, stderr := gpusnap(t, append(diffArgs, "--textfile", prom)...); code != exitClean {
		t.Fatalf("clean diff: exit %d: %s %s", code, stdout, stderr)
	}
	fams := readTextfile(t, prom)
	if v, ok := series(fams, "gpusnap_last_run_verdict", map[string]string{"verdict": "clean"}); !ok || v != 1 {
		t.Errorf("verdict clean = %v (present %v), want 1", v, ok)
	}
	if fams["gpusnap_findings"] != nil {
		t.Errorf("a clean diff wrote findings: %v", fams["gpusnap_findings"])
	}

	// Clean, and the textfile asked for not written: exit 2, not a clean verdict no one can see.
	bad := filepath.Join(dir, "missing", "gpusnap.prom")
	code, _, stderr = gpusnap(t, append(diffArgs, "--textfile", bad)...)
	if code != exitError || !strings.Contains(stderr, "gpusnap: textfile "+bad) {
		t.Errorf("clean, textfile unwritable: exit %d (want 2), stderr %q", code, stderr)
	}
}

func TestCheckTextfile(t *testing.T) {
	prom := filepath.Join(t.TempDir(), "gpusnap-check.prom")
	code, stdout, stderr := runCLI(t, "check", "--gpus", "0", "--proc-root", psFixture, "--nvml-fixture", nvmlFixture("h100x8.json"), "--textfile", prom)
	if code != exitFindings {
		t.Fatalf("check of a GPU in use: exit %d, want 1: %s %s", code, stdout, stderr)
	}
	fams := readTextfile(t, prom)
	if v, ok := series(fams, "gpusnap_findings", map[string]string{"command": "check", "kind": "gpu_in_use", "severity": "high"}); !ok || v < 1 {
		t.Errorf("gpu_in_use findings = %v (present %v), want at least 1", v, ok)
	}
	if v, ok := series(fams, "gpusnap_last_run_verdict", map[string]string{"command": "check", "verdict": "findings"}); !ok || v != 1 {
		t.Errorf("check verdict findings = %v (present %v), want 1", v, ok)
	}
	// A GPU asked for that is not there is not known to be clean: exit 2, recorded as an error.
	code, _, _ = runCLI(t, "check", "--gpus", "9", "--proc-root", psFixture, "--nvml-fixture", nvmlFixture("h100x8.json"), "--textfile", prom)
	if v, ok := series(readTextfile(t, prom), "gpusnap_last_run_verdict", map[string]string{"command": "check", "verdict": "error"}); code != exitError || !ok || v != 1 {
		t.Errorf("check --gpus 9: exit %d, verdict error = %v (present %v)", code, v, ok)
	}
}

// TestTextfileRefusesForeignDirectoryLink: as root, --textfile into a
// directory that is a symbolic link another user made (user nobody, with
// ln -s in a sticky directory anyone can write, pointing at a directory
// only root can write) is refused, as --bundle refuses it: nothing is
// written in the target, and a clean diff then exits 2, since the result
// asked for was not written.
func TestTextfileRefusesForeignDirectoryLink(t *testing.T) {
	livetest.Require(t, "setpriv")
	const name = "clean-persistenced-unchanged"
	dir, err := os.MkdirTemp("", "gpusnap-textfile-") // t.TempDir's parent is root's alone
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	target, shared := filepath.Join(dir, "root-only"), filepath.Join(dir, "shared")
	if err := os.Mkdir(target, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o1777); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(shared, "textfile")
	ln := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "ln", "-s", target, link)
	if out, err := ln.CombinedOutput(); err != nil {
		t.Fatalf("ln -s as nobody: %v: %s", err, out)
	}
	db := filepath.Join(dir, "gpusnap.db")
	if code, _, stderr := gpusnap(t, append([]string{"baseline", "--tenant", "job-3"}, sideArgs(db, name, "before")...)...); code != exitClean {
		t.Fatalf("baseline: exit %d: %s", code, stderr)
	}
	diffArgs := append([]string{"diff", "--tenant", "job-3"}, sideArgs(db, name, "after")...)
	code, _, stderr := gpusnap(t, append(diffArgs, "--textfile", filepath.Join(link, "gpusnap.prom"))...)
	if code != exitError || !strings.Contains(stderr, "refusing to write through") {
		t.Errorf("--textfile through nobody's link: exit %d (want 2), stderr %q", code, stderr)
	}
	code, _, stderr = gpusnap(t, append(diffArgs, "--bundle", filepath.Join(link, "b.tar.gz"), "--bundle-always")...)
	if code != exitError || !strings.Contains(stderr, "refusing to write through") {
		t.Errorf("--bundle through nobody's link: exit %d (want 2), stderr %q", code, stderr)
	}
	if left, _ := os.ReadDir(target); len(left) != 0 {
		t.Errorf("written through nobody's link into a root-only directory: %v", left)
	}
}

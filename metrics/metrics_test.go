package metrics

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/internal/livetest"
	"github.com/gpusnap/gpusnap/snapshot"
)

func u64(v uint64) *uint64 { return &v }

func ghostRun() Run {
	return Run{
		Command: "diff",
		End:     time.Unix(1764500000, 500e6),
		Verdict: VerdictFindings,
		Findings: []diff.Finding{
			{Kind: diff.KindLeftoverDeviceMapping, Severity: diff.High, Triage: &diff.Triage{Class: diff.ClassLeftoverWorker}},
			{Kind: diff.KindLeftoverDeviceMapping, Severity: diff.High, Triage: &diff.Triage{Class: diff.ClassLeftoverWorker}},
			{Kind: diff.KindLeftoverDeviceHolder, Severity: diff.Medium},
			{Kind: diff.KindOtherDeviceMapping, Severity: diff.Info, Allowed: "exe /usr/bin/x"},
		},
		GPUs: []snapshot.GPUUse{
			// 1 GiB under a dead PID and 1 GiB no one is listed for: 2 GiB no live process accounts for.
			{UUID: "GPU-aaaa", Memory: &snapshot.Memory{Used: 3 << 30}, Unaccounted: u64(2 << 30), Processes: []snapshot.GPUProcessUse{
				{PID: 10, UsedGPUMemory: u64(1 << 30), Join: snapshot.JoinPID},
				{PID: 11, UsedGPUMemory: u64(1 << 30), Join: snapshot.JoinNone},
			}},
			{UUID: "GPU-bbbb", Memory: &snapshot.Memory{Used: 1 << 30}}, // a list NVML refused: cannot be told, no series
			{UUID: "GPU-cccc", Memory: &snapshot.Memory{Used: 0}, Unaccounted: u64(0)},
		},
		Unchecked: 1,
	}
}

const ghostText = `
# HELP gpusnap_findings Findings of the command's last run, by kind, severity (after --allow) and triage class (none for a finding without one); a combination found nothing has no series.
# TYPE gpusnap_findings gauge
gpusnap_findings{class="leftover_worker",command="diff",kind="leftover_device_mapping",severity="high"} 2
gpusnap_findings{class="none",command="diff",kind="leftover_device_holder",severity="medium"} 1
gpusnap_findings{class="none",command="diff",kind="other_device_mapping",severity="info"} 1
# HELP gpusnap_gpu_unaccounted_memory_bytes GPU memory in use that no live process accounts for (a ghost's context under a dead PID counts), at the command's last capture; no series for a GPU where it cannot be told.
# TYPE gpusnap_gpu_unaccounted_memory_bytes gauge
gpusnap_gpu_unaccounted_memory_bytes{command="diff",gpu_uuid="GPU-aaaa"} 2.147483648e+09
gpusnap_gpu_unaccounted_memory_bytes{command="diff",gpu_uuid="GPU-cccc"} 0
# HELP gpusnap_last_run_timestamp_seconds When the command's last run ended, in seconds since the Unix epoch.
# TYPE gpusnap_last_run_timestamp_seconds gauge
gpusnap_last_run_timestamp_seconds{command="diff"} 1.7645000005e+09
# HELP gpusnap_last_run_unchecked What the command's last run could not check (NVML unread, refused processes, another boot): the notes of its report.
# TYPE gpusnap_last_run_unchecked gauge
gpusnap_last_run_unchecked{command="diff"} 1
# HELP gpusnap_last_run_verdict 1 for the verdict of the command's last run (clean: exit 0, findings: exit 1, error: exit 2), 0 for the others.
# TYPE gpusnap_last_run_verdict gauge
gpusnap_last_run_verdict{command="diff",verdict="clean"} 0
gpusnap_last_run_verdict{command="diff",verdict="error"} 0
gpusnap_last_run_verdict{command="diff",verdict="findings"} 1
`

func TestObserve(t *testing.T) {
	s := New("v1.2.3")
	s.Observe(ghostRun())
	names := []string{"gpusnap_findings", "gpusnap_gpu_unaccounted_memory_bytes", "gpusnap_last_run_timestamp_seconds",
		"gpusnap_last_run_unchecked", "gpusnap_last_run_verdict"}
	if err := testutil.GatherAndCompare(s, strings.NewReader(ghostText), names...); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(s, "gpusnap_build_info"); err != nil || n != 1 {
		t.Fatalf("gpusnap_build_info: %d series, %v", n, err)
	}

	// The next run replaces the last: a clean run leaves no findings series,
	// and a GPU gone from the capture leaves no memory series.
	s.Observe(Run{Command: "diff", End: time.Unix(1764500100, 0), Verdict: VerdictClean,
		GPUs: []snapshot.GPUUse{{UUID: "GPU-aaaa", Memory: &snapshot.Memory{}, Unaccounted: u64(0)}}})
	for name, want := range map[string]int{"gpusnap_findings": 0, "gpusnap_gpu_unaccounted_memory_bytes": 1, "gpusnap_last_run_verdict": 3} {
		if n, err := testutil.GatherAndCount(s, name); err != nil || n != want {
			t.Errorf("%s after a clean run: %d series (want %d), %v", name, n, want, err)
		}
	}
	// Another command's run sits beside it.
	s.Observe(Run{Command: "check", End: time.Unix(1764500200, 0), Verdict: VerdictError})
	if n, _ := testutil.GatherAndCount(s, "gpusnap_last_run_verdict"); n != 6 {
		t.Errorf("verdicts of diff and check: %d series, want 6", n)
	}
}

func TestWriteTextfile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gpusnap.prom")
	s := New("v1.2.3")
	s.Observe(ghostRun())
	if err := s.WriteTextfile(t.Context(), path); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	// node_exporter runs as its own user: the file must be readable by it.
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("textfile mode %v, want 0644", fi.Mode().Perm())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("textfile dir holds %d entries, want the file alone (no temporary left)", len(entries))
	}
	data, _ := os.ReadFile(path)
	// The text is client_golang's, byte for byte: families by name, labels
	// by name, series by their values.
	want := `# HELP gpusnap_build_info Always 1: the gpusnap version and Go version the command was built with.
# TYPE gpusnap_build_info gauge
gpusnap_build_info{command="diff",goversion="` + runtime.Version() + `",version="v1.2.3"} 1` + ghostText
	if string(data) != want {
		t.Errorf("textfile:\n%s\nwant:\n%s", data, want)
	}
	livetest.PromtoolCheck(t, data)

	// A label value that is not UTF-8 is refused, as client_golang refuses
	// it, and the file is left as it was.
	s.Observe(Run{Command: "diff", End: time.Unix(1764500100, 0), Verdict: VerdictClean,
		GPUs: []snapshot.GPUUse{{UUID: "GPU-\xff", Unaccounted: u64(1)}}})
	if err := s.WriteTextfile(t.Context(), path); err == nil || !strings.Contains(err.Error(), "not UTF-8") {
		t.Errorf("a GPU UUID that is not UTF-8: %v", err)
	}
	if again, _ := os.ReadFile(path); string(again) != want {
		t.Errorf("a refused write changed the textfile:\n%s", again)
	}

	// A directory that is not there: an error naming the file, and nothing written.
	if err := s.WriteTextfile(t.Context(), filepath.Join(dir, "missing", "gpusnap.prom")); err == nil || !strings.Contains(err.Error(), "missing/gpusnap.prom") {
		t.Errorf("write into a missing directory: %v", err)
	}
}

// A reap counts its actions by step and outcome, and its next run replaces
// them.
func TestObserveReaped(t *testing.T) {
	s := New("v1.2.3")
	s.Observe(Run{Command: "reap", End: time.Unix(1764500150, 0), Verdict: VerdictClean,
		Reaped: []Reaped{{"freeze", "done"}, {"terminate", "done"}, {"terminate", "done"}, {"leave", "left"}}})
	reaped := `# HELP gpusnap_reap_actions Actions of gpusnap reap's last run, by step and outcome; a step and outcome that did not occur has no series.
# TYPE gpusnap_reap_actions gauge
gpusnap_reap_actions{command="reap",result="done",step="freeze"} 1
gpusnap_reap_actions{command="reap",result="done",step="terminate"} 2
gpusnap_reap_actions{command="reap",result="left",step="leave"} 1
`
	if err := testutil.GatherAndCompare(s, strings.NewReader(reaped), "gpusnap_reap_actions"); err != nil {
		t.Error(err)
	}
	s.Observe(Run{Command: "reap", End: time.Unix(1764500160, 0), Verdict: VerdictClean})
	if n, err := testutil.GatherAndCount(s, "gpusnap_reap_actions"); err != nil || n != 0 {
		t.Errorf("gpusnap_reap_actions after a reap of nothing: %d series, %v", n, err)
	}
}

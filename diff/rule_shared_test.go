package diff

import (
	"strings"
	"testing"
)

// A process on the job's GPU at FROM that is neither allowed nor the
// tenant's is gpu_in_use whether it holds the GPU still at TO (nothing
// gained since FROM, so no leftover rule sees it) or left. One on a GPU the
// job was not given, the tenant's own, and an allowed one are not.
func TestSharedAtFrom(t *testing.T) {
	squatter := proc(300, 400, "squat", "/usr/bin/squat", holder(3, "/dev/nvidia0", "rw", "195:0"))
	gone := proc(301, 410, "squat", "/usr/bin/squat", mapping("/dev/nvidia0", "rw-s", 0x7f0000000000, 1<<21, 0, "195:0"))
	elsewhere := proc(302, 420, "other", "/usr/bin/other", holder(3, "/dev/nvidia1", "rw", "195:1"))
	own := proc(303, 430, "python3", "/usr/bin/python3", slurmJob("42"), holder(3, "/dev/nvidia0", "rw", "195:0"))
	daemon := proc(304, 440, "nvidia-persistenced", "/usr/bin/nvidia-persistenced", holder(3, "/dev/nvidia0", "r", "195:0"))
	listed := proc(305, 450, "cuda", "/opt/cuda")
	from := allocated(withGPUs(snap("base", squatter, gone, elsewhere, own, daemon, listed),
		gpuN(0, "GPU-0", 1<<30, gp(305, 1<<30)), gpuN(1, "GPU-1", 0)), "42", "0")
	to := withGPUs(snap("post", squatter, elsewhere, own, daemon, listed), gpuN(0, "GPU-0", 1<<30, gp(305, 1<<30)), gpuN(1, "GPU-1", 0))
	allow, err := ParseAllow(strings.NewReader("exe=/usr/bin/nvidia-persistenced\n"), "test")
	if err != nil {
		t.Fatal(err)
	}
	r := Compare(from, to, Options{ZombieThreshold: DefaultZombieThreshold, Allow: allow})
	var shared []string
	for _, f := range r.Findings {
		if f.Kind != KindGPUInUse {
			continue
		}
		shared = append(shared, f.Severity.String()+" "+f.Process.Key())
		if f.Process.PID == 300 && (!strings.Contains(f.Summary, "at FROM") || !strings.Contains(f.Summary, "alive at TO") ||
			!strings.Contains(strings.Join(f.Evidence, "\n"), "GPUs 0 given to tenant 42 at FROM (base)")) {
			t.Errorf("pid 300: summary or evidence does not say where and whose: %s %q", f.Summary, f.Evidence)
		}
		if f.Process.PID == 301 && !strings.Contains(f.Summary, "gone at TO") {
			t.Errorf("pid 301: summary does not say it left: %s", f.Summary)
		}
	}
	want := "high 300@400\nhigh 301@410\nhigh 305@450\ninfo 304@440"
	if have := strings.Join(shared, "\n"); have != want {
		t.Fatalf("gpu_in_use findings:\n%s\nwant\n%s\nall: %q", have, want, got(r))
	}

	// Without an allocation the job's GPUs are not known, so nothing.
	from.Allocation = nil
	for _, f := range Compare(from, to, Options{}).Findings {
		if f.Kind == KindGPUInUse {
			t.Errorf("raised without an allocation: %s", f.Summary)
		}
	}
}

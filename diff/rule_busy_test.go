package diff

import (
	"strings"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/snapshot"
)

// busyFor is a GPU's SM utilization, 100% from sample from for n samples, else 0.
func busyFor(from, n int) func(int) int {
	return func(i int) int {
		if i >= from && i < from+n {
			return 100
		}
		return 0
	}
}

func TestGPUBusyWithoutProcess(t *testing.T) {
	node := snapshot.GPU{Index: 0, UUID: "GPU-0", MinorNumber: intp(0), Memory: &snapshot.Memory{Total: 80 << 30}}
	to := func(procs ...snapshot.Process) *snapshot.Snapshot { return withGPUs(snap("to", procs...), node) }
	// A GPU pinned at 100% for 20 s with no process listed is high, timed at its start.
	r := compareWindow(Options{Events: eventsOf(utilEvents("GPU-0", 120, busyFor(40, 20), 0)...)}, withGPUs(snap("from"), node), to())
	expect(t, r, "gpu_busy_without_process high 0")
	f := r.Findings[0]
	if f.GPUUUID != "GPU-0" || f.Time == nil || !f.Time.Equal(t0.Add(time.Minute+40*time.Second)) ||
		!strings.Contains(f.Summary, "GPU 0 (GPU-0) was at 50% or more for 20 consecutive samples") ||
		!strings.Contains(strings.Join(f.Evidence, "\n"), "no live process at TO holds or maps /dev/nvidia0") {
		t.Errorf("finding: %+v", f)
	}
	if f.Triage == nil || f.Triage.Class != ClassZombieContext {
		t.Errorf("triage: %+v", f.Triage)
	}
	// Nine samples are not enough, and a process listed makes it the process's use.
	expect(t, compareWindow(Options{Events: eventsOf(utilEvents("GPU-0", 120, busyFor(40, 9), 0)...)}, withGPUs(snap("from"), node), to()))
	expect(t, compareWindow(Options{Events: eventsOf(utilEvents("GPU-0", 120, busyFor(40, 20), 1)...)}, withGPUs(snap("from"), node), to()))
	// A process began mapping its node in the window, at TO. The busy GPU
	// may be its use NVML does not list, so it is a finding of its own, and
	// the busy GPU a note.
	holder := proc(70, 7, "trainer", "/opt/trainer", mapping("/dev/nvidia0", "rw-s", 0x7f0000000000, 4096, 0, "195:0"))
	busy := func() Options { return Options{Events: eventsOf(utilEvents("GPU-0", 120, busyFor(40, 20), 0)...)} }
	r = compareWindow(busy(), withGPUs(snap("from"), node), to(holder))
	if len(r.Findings) == 0 || r.Findings[0].Kind == KindGPUBusyWithoutProcess || !strings.Contains(strings.Join(r.Notes, "\n"), "70@7 (trainer, pid 70) held or mapped its node at TO") {
		t.Errorf("a new holder at TO: findings %+v, notes %q", r.Findings, r.Notes)
	}
	// One that held it at FROM already (nvidia-persistenced or DCGM, on
	// every host), or one the allow list takes, silences nothing.
	expect(t, compareWindow(busy(), withGPUs(snap("from", holder), node), to(holder)), "gpu_busy_without_process high 0")
	allowed := busy()
	var err error
	if allowed.Allow, err = ParseAllow(strings.NewReader("exe=/opt/trainer\n"), "allow"); err != nil {
		t.Fatal(err)
	}
	r = compareWindow(allowed, withGPUs(snap("from"), node), to(holder))
	raised := 0
	for _, f := range r.Findings {
		if f.Kind == KindGPUBusyWithoutProcess && f.Allowed == "" {
			raised++
		}
	}
	if raised != 1 {
		t.Errorf("an allowed holder silenced the busy GPU: %+v", r.Findings)
	}
	// A MIG instance busy alone is raised for the instance.
	mig := utilEvents("MIG-1", 120, busyFor(0, 30), 0)
	for _, e := range mig {
		e.Util.Parent = "GPU-0"
	}
	r = compareWindow(Options{Events: eventsOf(mig...)}, withGPUs(snap("from"), node), to())
	expect(t, r, "gpu_busy_without_process high 0")
	if r.Findings[0].GPUUUID != "MIG-1" {
		t.Errorf("MIG finding: %+v", r.Findings[0])
	}
	// Samples whose process lists were unread end a run, as nothing is known of them.
	unread := utilEvents("GPU-0", 120, busyFor(40, 15), 0)
	expect(t, compareWindow(Options{Events: eventsOf(unread...)}, withGPUs(snap("from"), node), to()), "gpu_busy_without_process high 0")
	unread[1].Util.Listed[17] = -1 // sample 47, leaving two runs of 7
	expect(t, compareWindow(Options{Events: eventsOf(unread...)}, withGPUs(snap("from"), node), to()))
}

// check raises it from the window's last samples only, for a GPU busy alone
// now, not one that was earlier and is idle since.
func TestCheckGPUBusyWithoutProcess(t *testing.T) {
	node := gpuN(0, "GPU-0", 0)
	other := gpuN(1, "GPU-1", 0)
	now := withGPUs(snap("now"), node, other)
	now.Host.CaptureStart = t0.Add(time.Hour)
	checkWith := func(list string, gpuSM func(int) int) *Result {
		opts := CheckOptions{ZombieThreshold: DefaultZombieThreshold, Events: eventsOf(utilEvents("GPU-0", 120, gpuSM, 0)...), Since: t0}
		if list != "" {
			s, _ := snapshot.ParseGPUList(list)
			opts.GPUs = &s
		}
		return Check(now, opts)
	}
	expect(t, checkWith("", busyFor(100, 20)), "gpu_busy_without_process high 0")
	expect(t, checkWith("0", busyFor(100, 20)), "gpu_busy_without_process high 0")
	expect(t, checkWith("1", busyFor(100, 20)))
	expect(t, checkWith("", busyFor(40, 20)))
}

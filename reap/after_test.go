package reap

import (
	"strconv"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/snapshot"
)

// holding is p holding /dev/nvidiaN open for writing.
func holding(p snapshot.Process, n int) snapshot.Process {
	p.Holders = append(p.Holders, snapshot.Holder{FD: 5, Target: "/dev/nvidia" + strconv.Itoa(n), Class: snapshot.ClassNVIDIA, GPUMinor: &n})
	return p
}

// The proof of a reap, GPU by GPU: a GPU a failing finding's process still
// uses, or whose memory a finding names, is not clean; a finding that names
// no GPU keeps every GPU from being clean; an allowed one (info) keeps none;
// a GPU the check could not read is not known to be clean; a GPU seen only
// before the actions (its leftover reaped) is asked about, and clean.
func TestGPUsAfter(t *testing.T) {
	one, two := 1, 2
	ghost := holding(proc(100, 1, 1000, "python3"), 0)
	daemon := holding(proc(200, 1, 0, "dcgm"), 0)
	reaped := holding(proc(300, 1, 1000, "worker"), 3)
	unreadable := proc(400, 1, 1000, "secret")
	to := &snapshot.Snapshot{Processes: []snapshot.Process{proc(1, 0, 0, "init"), ghost, daemon, unreadable}}
	to.Host.GPUNodes = []int{0, 1}
	to.NVML.Devices = []snapshot.GPU{{Index: 0, UUID: "GPU-a", MinorNumber: new(int)}, {Index: 1, UUID: "GPU-b", MinorNumber: &one}, {Index: 2, UUID: "GPU-c", MinorNumber: &two}}
	before := &snapshot.Snapshot{Processes: []snapshot.Process{reaped}}
	held := finding(diff.KindLeftoverDeviceHolder, diff.ClassLeftoverWorker, diff.High, ghost)
	allowed := finding(diff.KindLeftoverDeviceHolder, diff.ClassExpected, diff.Info, daemon)
	zombie := diff.Finding{Kind: diff.KindZombieGPUMemory, Severity: diff.High, GPUUUID: "GPU-b", Summary: "1 GiB no process accounts for"}
	unread := finding(diff.KindUnreadableProcess, diff.ClassLeftoverWorker, diff.Medium, unreadable)
	medium := diff.AtLeast(diff.Medium)

	mapped := finding(diff.KindLeftoverDeviceMapping, diff.ClassLeftoverWorker, diff.High, ghost)
	got := GPUsAfter(&diff.Result{Findings: []diff.Finding{held, allowed, zombie, mapped}}, to, nil, medium, before)
	want := []string{
		"gpu 0 (GPU-a): not clean: 100@1100 (python3), leftover_worker: leftover_device_holder, leftover_device_mapping",
		"gpu 1 (GPU-b): not clean: zombie_gpu_memory: 1 GiB no process accounts for",
		"gpu 2 (GPU-c): clean",
		"gpu 3: clean",
	}
	check := func(name string, got []GPUAfter, want []string) {
		t.Helper()
		var lines []string
		for _, g := range got {
			lines = append(lines, g.String())
		}
		if strings.Join(lines, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s:\n%s\nwant\n%s", name, strings.Join(lines, "\n"), strings.Join(want, "\n"))
		}
	}
	check("every GPU seen", got, want)

	got = GPUsAfter(&diff.Result{Findings: []diff.Finding{allowed, unread}}, to, &snapshot.GPUSet{Minors: []int{0, 1}}, medium)
	for _, g := range got {
		if g.Verdict != diff.VerdictNotClean || len(g.Why) != 1 || !strings.Contains(g.Why[0], "it may concern any") {
			t.Errorf("a finding naming no GPU: %s: want not clean, naming it", g)
		}
	}

	scope := &diff.CheckScope{Unchecked: []string{"GPU 5: NVML does not show it", "GPU-z: NVML does not show it, so no device node can be matched to it"}}
	got = GPUsAfter(&diff.Result{Findings: []diff.Finding{allowed}, Check: scope}, to, &snapshot.GPUSet{Minors: []int{0, 5}, UUIDs: []string{"GPU-a", "GPU-z"}}, medium)
	check("a check's GPUs", got, []string{
		"gpu 0 (GPU-a): clean",
		"gpu 5: not known to be clean: not read: GPU 5: NVML does not show it",
		"gpu GPU-z: not known to be clean: not read: GPU-z: NVML does not show it, so no device node can be matched to it",
	})
}

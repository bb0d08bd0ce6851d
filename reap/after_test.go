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
	check := func(name string, got []GPUAfter, want []string) { t.Helper(); checkLines(t, name, got, want) }
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

// Other vendors' accelerators asked for by ID (reap --gpus amd:0, an
// allocation naming AMD or Intel devices) get a line each, as NVIDIA's GPUs
// do: one whose render node a failing finding's process holds, or on which
// KFD says it holds memory, is not clean; another is clean; an ID no
// snapshot's device has is not known to be clean.
func TestGPUsAfterAccel(t *testing.T) {
	render := snapshot.DeviceNumber{Major: snapshot.DRMMajor, Minor: 128}
	ghost := proc(100, 1, 1000, "python3")
	ghost.Holders = []snapshot.Holder{{FD: 5, Target: "/dev/dri/renderD128", DeviceNumber: render, Class: "drm"}}
	kfdUser := proc(101, 1, 1000, "hip")
	kfdUser.Holders = []snapshot.Holder{{FD: 6, Target: "/dev/kfd", DeviceNumber: snapshot.DeviceNumber{Major: 511}}}
	to := &snapshot.Snapshot{Processes: []snapshot.Process{ghost, kfdUser}, Accelerators: &snapshot.Accelerators{
		Devices: []snapshot.Accelerator{
			{Vendor: "amd", Name: "0000:03:00.0", IDs: []string{"amd:0", "0000:03:00.0", "card0"},
				Nodes: []snapshot.AccelNode{{Path: "/dev/dri/renderD128", DeviceNumber: render, Kind: snapshot.NodeRender}}},
			{Vendor: "amd", Name: "0000:04:00.0", IDs: []string{"amd:1", "0000:04:00.0", "card1"}, KFDGPUID: 4242,
				Nodes: []snapshot.AccelNode{{Path: "/dev/dri/renderD129", DeviceNumber: snapshot.DeviceNumber{Major: snapshot.DRMMajor, Minor: 129}, Kind: snapshot.NodeRender}}},
			{Vendor: "intel", Name: "0000:05:00.0", IDs: []string{"intel:0", "0000:05:00.0", "card2"}},
		},
		KFDProcesses: []snapshot.KFDProcess{{PID: 101, VRAM: []snapshot.KFDMemory{{GPUID: 4242, Bytes: 1 << 30}}}},
	}}
	r := &diff.Result{Findings: []diff.Finding{
		finding(diff.KindLeftoverDeviceHolder, diff.ClassLeftoverWorker, diff.High, ghost),
		finding(diff.KindLeftoverDeviceHolder, diff.ClassLeftoverWorker, diff.High, kfdUser),
	}}
	got := GPUsAfter(r, to, &snapshot.GPUSet{Accel: []string{"amd:0", "card1", "intel:0", "amd:7"}}, diff.AtLeast(diff.Medium))
	checkLines(t, "accelerators asked for", got, []string{
		"gpu amd:0: not clean: 100@1100 (python3), leftover_worker: leftover_device_holder",
		"gpu card1: not clean: 101@1101 (hip), leftover_worker: leftover_device_holder",
		"gpu intel:0: clean",
		"gpu amd:7: not known to be clean: not read: no accelerator the snapshots show has the ID amd:7",
	})
}

// checkLines fails t unless the GPUs' lines are want.
func checkLines(t *testing.T, name string, got []GPUAfter, want []string) {
	t.Helper()
	var lines []string
	for _, g := range got {
		lines = append(lines, g.String())
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("%s:\n%s\nwant\n%s", name, strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

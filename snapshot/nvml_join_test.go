package snapshot

import (
	"path/filepath"
	"reflect"
	"testing"
)

func holder(minor int) Holder {
	return Holder{FD: 3, Target: "/dev/nvidia" + string(rune('0'+minor)), Access: "rw", Class: ClassNVIDIA, GPUMinor: &minor}
}

func mapping(minor int) Mapping {
	return Mapping{Perms: "rw-s", Path: "/dev/nvidia" + string(rune('0'+minor)), Class: ClassNVIDIA, GPUMinor: &minor}
}

// ctl is /dev/nvidiactl held: a process using an NVIDIA device, no GPU's node.
var ctl = []Holder{{FD: 4, Target: "/dev/nvidiactl", Access: "rw", Class: ClassNVIDIA}}

func joinSnapshot() *Snapshot {
	used := func(v uint64) *uint64 { return &v }
	return &Snapshot{
		Processes: []Process{
			{PID: 100, Comm: "python3", NSpid: []int{100}, Mappings: []Mapping{mapping(0)}, Holders: []Holder{holder(0)}},
			{PID: 400, Comm: "ghost", Holders: []Holder{holder(0), {FD: 4, Target: "/dev/nvidiactl", Class: ClassNVIDIA}}},
			{PID: 4300, Comm: "trainer", NSpid: []int{4300, 300}, Holders: ctl},
			{PID: 4400, Comm: "shell", NSpid: []int{4400, 8}}, // uses no NVIDIA device: never NVML's PID 8
			{PID: 500, Comm: "miner", Mappings: []Mapping{mapping(1), {Path: "/dev/dri/card0", Class: ClassOther}}},
			{PID: 600, Comm: "a", NSpid: []int{600, 7}, Holders: ctl},
			{PID: 601, Comm: "b", NSpid: []int{601, 7}, Holders: ctl},
		},
		NVML: NVML{Devices: []GPU{
			{Index: 0, UUID: "GPU-0", MinorNumber: ptr(0), Memory: &Memory{Total: 80 * gib, Used: 20 * gib},
				ComputeProcesses:   []GPUProcess{{PID: 100, UsedGPUMemory: used(4 * gib)}, {PID: 200, UsedGPUMemory: used(2 * gib)}, {PID: 300, UsedGPUMemory: used(3 * gib)}},
				GraphicsProcesses:  []GPUProcess{{PID: 100, UsedGPUMemory: used(4 * gib)}},
				ProcessUtilization: []ProcessUtilization{{PID: 100, SMUtil: 88, MemUtil: 9}},
			},
			{Index: 1, UUID: "GPU-1", MinorNumber: ptr(1), Memory: &Memory{Total: 80 * gib, Used: gib},
				ComputeProcesses: []GPUProcess{{PID: 7, UsedGPUMemory: used(gib)}, {PID: 8}},
			},
			{Index: 2, UUID: "GPU-2", MinorNumber: ptr(2), Memory: &Memory{Total: 80 * gib, Used: 5 * gib}},
		}, Missing: map[string]string{"devices[2].graphics_processes": "no permission"}},
	}
}

func TestGPUUsage(t *testing.T) {
	s := joinSnapshot()
	u := GPUUsage(s)
	if len(u) != 3 {
		t.Fatalf("%d GPUs", len(u))
	}
	g := u[0]
	type row struct {
		pid   int
		types string
		mem   uint64
		proc  int
		join  string
	}
	var got []row
	for _, p := range g.Processes {
		r := row{pid: p.PID, types: p.Types, join: p.Join}
		if p.UsedGPUMemory != nil {
			r.mem = *p.UsedGPUMemory
		}
		if p.Process != nil {
			r.proc = p.Process.PID
		}
		got = append(got, r)
	}
	want := []row{
		{100, "C+G", 4 * gib, 100, JoinPID},
		{200, "C", 2 * gib, 0, JoinNone}, // an orphan: no live process
		{300, "C", 3 * gib, 4300, JoinNSpid},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("gpu 0 processes:\n got %+v\nwant %+v", got, want)
	}
	if g.Processes[0].Utilization == nil || g.Processes[0].Utilization.SMUtil != 88 {
		t.Errorf("utilization of 100: %+v", g.Processes[0].Utilization)
	}
	if g.Unaccounted == nil || *g.Unaccounted != 11*gib {
		t.Errorf("gpu 0 unaccounted: %v, want 11 GiB", g.Unaccounted)
	}
	// The orphan 200's 2 GiB is listed, but no live process holds it.
	if l := g.UnaccountedByLive(); l == nil || *l != 13*gib {
		t.Errorf("gpu 0 unaccounted by live processes: %v, want 13 GiB", l)
	}
	// 400 holds /dev/nvidia0 unlisted; its /dev/nvidiactl is no GPU's; 500 maps nvidia1.
	if len(g.Unlisted) != 1 || g.Unlisted[0].PID != 400 || len(g.Unlisted[0].Holders) != 1 || g.Unlisted[0].Mappings != nil {
		t.Errorf("gpu 0 unlisted: %+v", g.Unlisted)
	}

	g = u[1]
	if p := g.Processes[0]; p.Join != JoinAmbiguous || p.Process != nil {
		t.Errorf("pid 7 in two namespaces: %+v", p)
	}
	if p := g.Processes[1]; p.PID != 8 || p.Join != JoinNone || p.Process != nil {
		t.Errorf("pid 8, a namespaced PID of a process on no GPU: %+v", p)
	}
	if g.Unaccounted != nil {
		t.Errorf("gpu 1 unaccounted %d, want unknown: pid 8's memory is not available", *g.Unaccounted)
	}
	if l := g.UnaccountedByLive(); l != nil {
		t.Errorf("gpu 1 unaccounted by live processes %d, want unknown", *l)
	}
	if len(g.Unlisted) != 1 || g.Unlisted[0].PID != 500 || len(g.Unlisted[0].Mappings) != 1 {
		t.Errorf("gpu 1 unlisted: %+v", g.Unlisted)
	}
	if g := u[2]; g.Unaccounted != nil || g.Processes != nil {
		t.Errorf("gpu 2 (graphics list refused): %+v", g)
	}
}

// TestGPUUsageHostView: a proc root with kernel threads is the host's, where
// NVML's host PIDs are the PIDs: PID 300, gone from the host, is an orphan,
// not the container process whose own namespace calls it 300.
func TestGPUUsageHostView(t *testing.T) {
	s := joinSnapshot()
	s.Processes = append(s.Processes, Process{PID: 2, Comm: "kthreadd", KernelThread: true})
	g := GPUUsage(s)[0]
	if p := g.Processes[2]; p.PID != 300 || p.Join != JoinNone || p.Process != nil {
		t.Errorf("pid 300 on a host view: %+v", p)
	}
	if p := GPUUsage(s)[1].Processes[0]; p.PID != 7 || p.Join != JoinNone {
		t.Errorf("pid 7 on a host view: %+v", p)
	}
}

// A zombie (exited, not reaped) is no live process: a PID NVML lists that
// only a zombie has is an orphan (JoinDefunct, naming the zombie), and a
// zombie does not hide the live container process that has the PID further
// down its NSpid chain.
func TestGPUUsageDefunct(t *testing.T) {
	s := joinSnapshot()
	s.Processes = append(s.Processes,
		Process{PID: 200, Comm: "python3", State: "Z", Threads: 1},
		Process{PID: 300, Comm: "sh", State: "Z", Threads: 1},
		Process{PID: 7, Comm: "worker", State: "Z", Threads: 4}) // its main thread exited, 3 others run
	g := GPUUsage(s)
	if p := g[0].Processes[1]; p.PID != 200 || p.Join != JoinDefunct || p.Process == nil || p.Process.Comm != "python3" {
		t.Errorf("pid 200, a zombie: %+v", p)
	}
	if p := g[0].Processes[2]; p.PID != 300 || p.Join != JoinNSpid || p.Process == nil || p.Process.PID != 4300 {
		t.Errorf("pid 300, a zombie here and a live process's namespaced PID: %+v", p)
	}
	if p := g[1].Processes[0]; p.PID != 7 || p.Join != JoinPID || p.Process == nil || p.Process.Comm != "worker" {
		t.Errorf("pid 7, a zombie leader whose threads run: %+v", p)
	}
	// On the host's /proc a zombie with a PID NVML lists is that PID's orphan.
	s.Processes = append(s.Processes, Process{PID: 2, Comm: "kthreadd", KernelThread: true})
	if p := GPUUsage(s)[0].Processes[2]; p.PID != 300 || p.Join != JoinDefunct || p.Process.Comm != "sh" {
		t.Errorf("pid 300 on a host view: %+v", p)
	}
}

func TestGPUUsageMIG(t *testing.T) {
	s := &Snapshot{
		NVML:      readFixture(t, filepath.Join("..", "fixtures", "nvml", "a100-mig.json")),
		Processes: []Process{{PID: 31337, Comm: "train"}, {PID: 31400, Comm: "infer"}},
	}
	u := GPUUsage(s)
	g := u[0]
	if len(g.Processes) != 2 || g.Processes[1].PID != 31400 || *g.Processes[1].GPUInstanceID != 5 || g.Processes[1].Process.Comm != "infer" {
		t.Errorf("gpu 0 processes: %+v", g.Processes)
	}
	if g.Unaccounted == nil || *g.Unaccounted != 3*gib {
		t.Errorf("gpu 0 unaccounted: %v", g.Unaccounted)
	}
	if len(g.MIG) != 3 || *g.MIG[0].Unaccounted != 0 || *g.MIG[2].Unaccounted != 3*gib || g.MIG[2].GPUInstanceID != 13 {
		t.Errorf("MIG: %+v", g.MIG)
	}
	if u[1].Processes[0].Join != JoinNone || *u[1].Unaccounted != 0 {
		t.Errorf("gpu 1: %+v", u[1])
	}
	if GPUUsage(&Snapshot{NVML: NVML{Unavailable: "library not found"}}) != nil {
		t.Error("usage without NVML")
	}
}

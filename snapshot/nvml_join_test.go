package snapshot_test

import (
	"path/filepath"
	"reflect"
	"testing"

	"github.com/gpusnap/gpusnap/nvmlread"
	"github.com/gpusnap/gpusnap/snapshot"
)

const gib = uint64(1) << 30

func ptr[T any](v T) *T { return &v }

// readFixture is NVML's view replayed from the fixture at path.
func readFixture(t *testing.T, path string) snapshot.NVML {
	t.Helper()
	n, err := (nvmlread.Options{FixturePath: path}).ReadNVML()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func holder(minor int) snapshot.Holder {
	return snapshot.Holder{FD: 3, Target: "/dev/nvidia" + string(rune('0'+minor)), Access: "rw", Class: snapshot.ClassNVIDIA, GPUMinor: &minor}
}

func mapping(minor int) snapshot.Mapping {
	return snapshot.Mapping{Perms: "rw-s", Path: "/dev/nvidia" + string(rune('0'+minor)), Class: snapshot.ClassNVIDIA, GPUMinor: &minor}
}

// ctl is /dev/nvidiactl held: a process using an NVIDIA device, no GPU's node.
var ctl = []snapshot.Holder{{FD: 4, Target: "/dev/nvidiactl", Access: "rw", Class: snapshot.ClassNVIDIA}}

func joinSnapshot() *snapshot.Snapshot {
	used := func(v uint64) *uint64 { return &v }
	return &snapshot.Snapshot{
		Processes: []snapshot.Process{
			{PID: 100, Comm: "python3", NSpid: []int{100}, Mappings: []snapshot.Mapping{mapping(0)}, Holders: []snapshot.Holder{holder(0)}},
			{PID: 400, Comm: "ghost", Holders: []snapshot.Holder{holder(0), {FD: 4, Target: "/dev/nvidiactl", Class: snapshot.ClassNVIDIA}}},
			{PID: 4300, Comm: "trainer", NSpid: []int{4300, 300}, Holders: ctl},
			{PID: 4400, Comm: "shell", NSpid: []int{4400, 8}}, // uses no NVIDIA device: never NVML's PID 8
			{PID: 500, Comm: "miner", Mappings: []snapshot.Mapping{mapping(1), {Path: "/dev/dri/card0", Class: snapshot.ClassOther}}},
			{PID: 600, Comm: "a", NSpid: []int{600, 7}, Holders: ctl},
			{PID: 601, Comm: "b", NSpid: []int{601, 7}, Holders: ctl},
		},
		NVML: snapshot.NVML{Devices: []snapshot.GPU{
			{Index: 0, UUID: "GPU-0", MinorNumber: ptr(0), Memory: &snapshot.Memory{Total: 80 * gib, Used: 20 * gib},
				ComputeProcesses:   []snapshot.GPUProcess{{PID: 100, UsedGPUMemory: used(4 * gib)}, {PID: 200, UsedGPUMemory: used(2 * gib)}, {PID: 300, UsedGPUMemory: used(3 * gib)}},
				GraphicsProcesses:  []snapshot.GPUProcess{{PID: 100, UsedGPUMemory: used(4 * gib)}},
				ProcessUtilization: []snapshot.ProcessUtilization{{PID: 100, SMUtil: 88, MemUtil: 9}},
			},
			{Index: 1, UUID: "GPU-1", MinorNumber: ptr(1), Memory: &snapshot.Memory{Total: 80 * gib, Used: gib},
				ComputeProcesses: []snapshot.GPUProcess{{PID: 7, UsedGPUMemory: used(gib)}, {PID: 8}},
			},
			{Index: 2, UUID: "GPU-2", MinorNumber: ptr(2), Memory: &snapshot.Memory{Total: 80 * gib, Used: 5 * gib}},
		}, Missing: map[string]string{"devices[2].graphics_processes": "no permission"}},
	}
}

func TestGPUUsage(t *testing.T) {
	s := joinSnapshot()
	u := snapshot.GPUUsage(s)
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
		{100, "C+G", 4 * gib, 100, snapshot.JoinPID},
		{200, "C", 2 * gib, 0, snapshot.JoinNone}, // an orphan: no live process
		{300, "C", 3 * gib, 4300, snapshot.JoinNSpid},
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
	if p := g.Processes[0]; p.Join != snapshot.JoinAmbiguous || p.Process != nil {
		t.Errorf("pid 7 in two namespaces: %+v", p)
	}
	if p := g.Processes[1]; p.PID != 8 || p.Join != snapshot.JoinNone || p.Process != nil {
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
	s.Processes = append(s.Processes, snapshot.Process{PID: 2, Comm: "kthreadd", KernelThread: true})
	g := snapshot.GPUUsage(s)[0]
	if p := g.Processes[2]; p.PID != 300 || p.Join != snapshot.JoinNone || p.Process != nil {
		t.Errorf("pid 300 on a host view: %+v", p)
	}
	if p := snapshot.GPUUsage(s)[1].Processes[0]; p.PID != 7 || p.Join != snapshot.JoinNone {
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
		snapshot.Process{PID: 200, Comm: "python3", State: "Z", Threads: 1},
		snapshot.Process{PID: 300, Comm: "sh", State: "Z", Threads: 1},
		snapshot.Process{PID: 7, Comm: "worker", State: "Z", Threads: 4}) // its main thread exited, 3 others run
	g := snapshot.GPUUsage(s)
	if p := g[0].Processes[1]; p.PID != 200 || p.Join != snapshot.JoinDefunct || p.Process == nil || p.Process.Comm != "python3" {
		t.Errorf("pid 200, a zombie: %+v", p)
	}
	if p := g[0].Processes[2]; p.PID != 300 || p.Join != snapshot.JoinNSpid || p.Process == nil || p.Process.PID != 4300 {
		t.Errorf("pid 300, a zombie here and a live process's namespaced PID: %+v", p)
	}
	if p := g[1].Processes[0]; p.PID != 7 || p.Join != snapshot.JoinPID || p.Process == nil || p.Process.Comm != "worker" {
		t.Errorf("pid 7, a zombie leader whose threads run: %+v", p)
	}
	// On the host's /proc a zombie with a PID NVML lists is that PID's orphan.
	s.Processes = append(s.Processes, snapshot.Process{PID: 2, Comm: "kthreadd", KernelThread: true})
	if p := snapshot.GPUUsage(s)[0].Processes[2]; p.PID != 300 || p.Join != snapshot.JoinDefunct || p.Process.Comm != "sh" {
		t.Errorf("pid 300 on a host view: %+v", p)
	}
}

func TestGPUUsageMIG(t *testing.T) {
	s := &snapshot.Snapshot{
		NVML:      readFixture(t, filepath.Join("..", "fixtures", "nvml", "a100-mig.json")),
		Processes: []snapshot.Process{{PID: 31337, Comm: "train"}, {PID: 31400, Comm: "infer"}},
	}
	u := snapshot.GPUUsage(s)
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
	if u[1].Processes[0].Join != snapshot.JoinNone || *u[1].Unaccounted != 0 {
		t.Errorf("gpu 1: %+v", u[1])
	}
	if snapshot.GPUUsage(&snapshot.Snapshot{NVML: snapshot.NVML{Unavailable: "library not found"}}) != nil {
		t.Error("usage without NVML")
	}
}

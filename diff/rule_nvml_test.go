package diff

import (
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/snapshot"
)

const gib = 1 << 30

func TestZombieMemory(t *testing.T) {
	trainer := proc(4242, 700, "python3", "/usr/bin/python3.11", holder(3, dev0, "rw", dev0No))
	dcgm := proc(900, 50, "nv-hostengine", "/usr/bin/nv-hostengine", holder(3, ctl, "rw", ctlNo))
	for _, tc := range []struct {
		name     string
		from, to *snapshot.Snapshot
		want     []string
	}{
		{"grown with no process listed",
			withGPUs(snap("a"), gpu(1<<20)),
			withGPUs(snap("b"), gpu(2*gib)),
			[]string{"zombie_gpu_memory high 0"}},
		{"grown below the threshold",
			withGPUs(snap("a"), gpu(1<<20)),
			withGPUs(snap("b"), gpu(60<<20)),
			nil},
		{"a new live process accounts for it",
			withGPUs(snap("a", dcgm), gpu(1<<20)),
			withGPUs(snap("b", dcgm, trainer), gpu(8*gib+(1<<20), gp(4242, 8*gib))),
			[]string{"leftover_device_holder high 4242 /dev/nvidia0", "unexpected_gpu_process medium 4242"}},
		{"a process alive at both ends grew",
			withGPUs(snap("a", dcgm), gpu(gib, gp(900, gib))),
			withGPUs(snap("b", dcgm), gpu(5*gib, gp(900, 5*gib))),
			nil},
		{"the process NVML lists is gone",
			withGPUs(snap("a"), gpu(1<<20)),
			withGPUs(snap("b"), gpu(8*gib, gp(7777, 8*gib))),
			[]string{"orphan_gpu_process high 7777", "zombie_gpu_memory high 0"}},
		{"a live process accounts for part of it",
			withGPUs(snap("a", dcgm), gpu(0)),
			withGPUs(snap("b", dcgm, trainer), gpu(10*gib, gp(4242, 2*gib))),
			[]string{"leftover_device_holder high 4242 /dev/nvidia0", "zombie_gpu_memory high 0", "unexpected_gpu_process medium 4242"}},
		{"a live process NVML gives no memory figure for",
			withGPUs(snap("a"), gpu(0)),
			withGPUs(snap("b", trainer), gpu(10*gib, snapshot.GPUProcess{PID: 4242})),
			[]string{"leftover_device_holder high 4242 /dev/nvidia0", "zombie_gpu_memory high 0", "unexpected_gpu_process medium 4242"}},
		{"NVML unread at FROM",
			snap("a"),
			withGPUs(snap("b"), gpu(10*gib)),
			nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.from.NVML.Devices == nil {
				tc.from.NVML = snapshot.NVML{Source: "disabled", Unavailable: "--no-nvml"}
			}
			expect(t, compare(tc.from, tc.to), tc.want...)
		})
	}
}

func TestZombieEvidenceAndNote(t *testing.T) {
	r := compare(withGPUs(snap("a"), gpu(1<<20)), withGPUs(snap("b"), gpu(2*gib+(1<<20))))
	f := first(t, r)
	ev := strings.Join(f.Evidence, "\n")
	for _, want := range []string{"memory.used at FROM: 1048576 bytes (1.00 MiB)", "memory.used at TO: 2148532224 bytes (2.00 GiB)",
		"nvml lists no process at TO", "unaccounted: +2147483648 bytes (2.00 GiB), above the threshold of 67108864 bytes (64.00 MiB)"} {
		if !strings.Contains(ev, want) {
			t.Errorf("evidence lacks %q:\n%s", want, ev)
		}
	}
	if f.GPUUUID != "GPU-0" || f.Process != nil {
		t.Errorf("finding = %+v", f)
	}
	from := snap("a")
	from.NVML = snapshot.NVML{Source: "library", Unavailable: "library not found"}
	r = compare(from, withGPUs(snap("b"), gpu(2*gib)))
	if len(r.Findings) != 0 || len(r.Notes) != 1 || !strings.Contains(r.Notes[0], "library not found") {
		t.Errorf("NVML unread at FROM: findings %v notes %q, want a note and nothing else", got(r), r.Notes)
	}
}

// migGPU is GPU 0 in MIG mode with two GPU instances, and instance 2 has two compute instances.
func migGPU(used1, used2 uint64, procs1 ...snapshot.GPUProcess) snapshot.GPU {
	g := gpu(used1 + used2)
	g.MIGMode = intp(1)
	g.MIGDevices = []snapshot.MIGDevice{
		{GPUInstanceID: 1, ComputeInstanceID: 0, UUID: "MIG-1", Memory: &snapshot.Memory{Total: 10 * gib, Used: used1}, ComputeProcesses: procs1},
		{GPUInstanceID: 2, ComputeInstanceID: 0, UUID: "MIG-2a", Memory: &snapshot.Memory{Total: 20 * gib, Used: used2}},
		{GPUInstanceID: 2, ComputeInstanceID: 1, UUID: "MIG-2b", Memory: &snapshot.Memory{Total: 20 * gib, Used: used2}},
	}
	return g
}

func TestZombieMemoryPerMIGInstance(t *testing.T) {
	trainer := proc(4242, 700, "python3", "/usr/bin/python3.11")
	from := withGPUs(snap("a"), migGPU(0, 0))
	// Instance 1 grew by a live process's memory, and instance 2 by memory nobody holds.
	to := withGPUs(snap("b", trainer), migGPU(3*gib, 4*gib, gp(4242, 3*gib)))
	r := compare(from, to)
	expect(t, r, "zombie_gpu_memory high 0", "unexpected_gpu_process medium 4242")
	if f := r.Findings[0]; f.GPUUUID != "MIG-2a" || !strings.Contains(f.Summary, "MIG instance 2") {
		t.Errorf("zombie on %q: %s, want MIG-2a (instance 2)", f.GPUUUID, f.Summary)
	}
	// A process listed on the parent GPU with its instance id counts for that instance.
	g := migGPU(3*gib, 0)
	g.ComputeProcesses = []snapshot.GPUProcess{{PID: 4242, UsedGPUMemory: u64(3 * gib), GPUInstanceID: u32(1), ComputeInstanceID: u32(0)}}
	expect(t, compare(from, withGPUs(snap("b", trainer), g)), "unexpected_gpu_process medium 4242")
}

func TestOrphans(t *testing.T) {
	old := proc(500, 100, "python3", "/usr/bin/python3.11")
	reused := proc(500, 900, "bash", "/usr/bin/bash")
	reusedOnGPU := proc(500, 900, "python3", "/usr/bin/python3.11", holder(3, dev0, "rw", dev0No))
	for _, tc := range []struct {
		name     string
		from, to *snapshot.Snapshot
		want     []string
	}{
		{"PID with no process",
			withGPUs(snap("a"), gpu(0)),
			withGPUs(snap("b"), gpu(gib, gp(7777, gib))),
			[]string{"orphan_gpu_process high 7777", "zombie_gpu_memory high 0"}},
		{"PID reused since FROM",
			withGPUs(snap("a", old), gpu(gib, gp(500, gib))),
			withGPUs(snap("b", reused), gpu(gib, gp(500, gib))),
			[]string{"orphan_gpu_process high 500"}},
		{"PID reused, memory grown by the stale entry",
			withGPUs(snap("a", old), gpu(gib, gp(500, gib))),
			withGPUs(snap("b", reused), gpu(5*gib, gp(500, 5*gib))),
			[]string{"orphan_gpu_process high 500", "zombie_gpu_memory high 0"}},
		{"PID reused by a process with no device, NVML silent at FROM",
			withGPUs(snap("a", old), gpu(0)),
			withGPUs(snap("b", reused), gpu(gib, gp(500, gib))),
			[]string{"orphan_gpu_process high 500", "zombie_gpu_memory high 0"}},
		{"PID reused by a process on the GPU, NVML silent at FROM",
			withGPUs(snap("a", old), gpu(0)),
			withGPUs(snap("b", reusedOnGPU), gpu(gib, gp(500, gib))),
			[]string{"leftover_device_holder high 500 /dev/nvidia0", "unexpected_gpu_process medium 500"}},
		{"PID reused by a process refused at TO, NVML silent at FROM",
			withGPUs(snap("a", old), gpu(0)),
			func() *snapshot.Snapshot {
				s := withGPUs(snap("b", reused), gpu(gib, gp(500, gib)))
				s.Scan.RefusedPIDs = []int{500}
				return s
			}(),
			[]string{"unexpected_gpu_process medium 500"}},
		{"same process at both ends",
			withGPUs(snap("a", old), gpu(gib, gp(500, gib))),
			withGPUs(snap("b", old), gpu(gib, gp(500, gib))),
			nil},
		{"orphan already at FROM",
			withGPUs(snap("a"), gpu(gib, gp(7777, gib))),
			withGPUs(snap("b"), gpu(gib, gp(7777, gib))),
			nil},
		{"PID refused by /proc at TO",
			withGPUs(snap("a"), gpu(0)),
			func() *snapshot.Snapshot {
				s := withGPUs(snap("b"), gpu(0, gp(1, 0)))
				s.Scan.RefusedPIDs = []int{1}
				return s
			}(),
			nil},
	} {
		t.Run(tc.name, func(t *testing.T) { expect(t, compare(tc.from, tc.to), tc.want...) })
	}
	r := compare(withGPUs(snap("a"), gpu(0)), withGPUs(snap("b"), gpu(0, gp(7777, 0))))
	if p := first(t, r).Process; p.PID != 7777 || p.UID != -1 || p.Comm != "" {
		t.Errorf("an orphan nobody had names %+v, want pid 7777 and uid -1 (unknown)", p)
	}
	r = compare(withGPUs(snap("a", old), gpu(gib, gp(500, gib))), withGPUs(snap("b", reused), gpu(gib, gp(500, gib))))
	f := first(t, r)
	if f.Process.StartTime != 100 || f.Process.Exe != "/usr/bin/python3.11" {
		t.Errorf("orphan names %+v, want the process that had the PID at FROM", f.Process)
	}
	if ev := strings.Join(f.Evidence, "\n"); !strings.Contains(ev, "now another process, 500@900 (bash)") {
		t.Errorf("evidence = %s", ev)
	}
}

func TestUnexpectedMasquerade(t *testing.T) {
	for _, tc := range []struct {
		name, comm, exe string
		deleted         bool
		want            Severity
		sign            string
	}{
		{"plain", "python3", "/usr/bin/python3.11", false, Medium, ""},
		{"script through an interpreter", "train.py", "/usr/bin/python3.11", false, Medium, ""},
		{"torch thread name", "pt_main_thread", "/opt/conda/bin/python3.10", false, Medium, ""},
		{"comm cut to 15 bytes", "nvidia-cuda-mps", "/usr/bin/nvidia-cuda-mps-control", false, Medium, ""},
		{"alternatives link", "vim", "/usr/bin/vim.basic", false, Medium, ""},
		{"staged in /tmp", "xmrig", "/tmp/xmrig", false, High, "lies under /tmp"},
		{"staged in /dev/shm", "x", "/dev/shm/x", false, High, "lies under /dev/shm"},
		{"staged in /var/tmp", "x", "/var/tmp/x", false, High, "lies under /var/tmp"},
		{"hidden directory", "kworker", "/home/bob/.cache/kworker", false, High, "hidden directory /home/bob/.cache"},
		{"deleted", "trainer", "/opt/app/trainer", true, High, "was deleted"},
		{"renamed", "python3", "/usr/local/bin/xmrig", false, High, `comm "python3" disagrees with exe /usr/local/bin/xmrig`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := proc(4242, 700, tc.comm, tc.exe, func(p *snapshot.Process) { p.ExeDeleted = tc.deleted })
			r := compare(withGPUs(snap("a"), gpu(0)),
				withGPUs(snap("b", p), func() snapshot.GPU {
					g := gpu(0, gp(4242, 0))
					g.ProcessUtilization = []snapshot.ProcessUtilization{{PID: 4242, SMUtil: 99, MemUtil: 12}}
					return g
				}()))
			expect(t, r, "unexpected_gpu_process "+tc.want.String()+" 4242")
			ev := strings.Join(r.Findings[0].Evidence, "\n")
			if tc.sign != "" && !strings.Contains(ev, tc.sign) {
				t.Errorf("evidence lacks %q:\n%s", tc.sign, ev)
			}
			if !strings.Contains(ev, "utilization on GPU GPU-0: sm 99%, memory 12%") || !strings.Contains(ev, "lists pid 4242 as a compute process") {
				t.Errorf("evidence lacks NVML's view:\n%s", ev)
			}
		})
	}
}

// A process that used the GPU at FROM is expected to use it at TO.
func TestUnexpectedNeedsANewUse(t *testing.T) {
	p := proc(4242, 700, "python3", "/usr/bin/python3.11")
	from := withGPUs(snap("a", p), gpu(gib, gp(4242, gib)))
	to := withGPUs(snap("b", p), gpu(gib, gp(4242, gib)))
	expect(t, compare(from, to))
}

// A process that holds a GPU that NVML gave a utilization sample for, but no
// process list, carries the sample in its evidence.
func TestUnexpectedUtilizationWithoutAList(t *testing.T) {
	p := proc(4242, 700, "python3", "/usr/bin/python3.11", holder(3, dev0, "rw", dev0No))
	g := gpu(0)
	g.ProcessUtilization = []snapshot.ProcessUtilization{{PID: 4242, SMUtil: 97, MemUtil: 40}}
	r := compare(withGPUs(snap("a"), gpu(0)), withGPUs(snap("b", p), g))
	expect(t, r, "leftover_device_holder high 4242 /dev/nvidia0", "unexpected_gpu_process medium 4242")
	if ev := strings.Join(r.Findings[1].Evidence, "\n"); !strings.Contains(ev, "utilization on GPU GPU-0: sm 97%, memory 40%") {
		t.Errorf("evidence lacks the utilization sample:\n%s", ev)
	}
}

// The real ghost, as seen on an H200. The tenant made a CUDA context and
// exited. Its forked child keeps the descriptors, so NVML lists the dead PID
// and the memory stays. The orphan and the zombie name the child.
func TestOrphanAndZombieNameTheGhostThatKeepsThem(t *testing.T) {
	ghost := proc(670, 25007, "dctenant", "/usr/local/bin/dctenant", holder(4, dev0, "rw", dev0No), holder(3, ctl, "rw", ctlNo))
	persistenced := proc(812, 50, "nvidia-persiste", "/usr/bin/nvidia-persistenced", holder(3, dev0, "rw", dev0No))
	r := compare(withGPUs(snap("a", persistenced), gpu(0)), withGPUs(snap("b", persistenced, ghost), gpu(2500<<20, gp(664, 2500<<20))))
	expect(t, r, "leftover_device_holder high 670 /dev/nvidia0", "leftover_device_holder high 670 /dev/nvidiactl",
		"orphan_gpu_process high 664", "zombie_gpu_memory high 0", "unexpected_gpu_process medium 670")
	const want = "/dev/nvidia0 is held or mapped by 670@25007 (dctenant, exe /usr/local/bin/dctenant), which NVML does not list there and which did not use it at FROM: it may keep the context alive"
	for _, f := range r.Findings[2:4] {
		ev := strings.Join(f.Evidence, "\n")
		if !strings.Contains(ev, want) || strings.Contains(ev, "812@50") {
			t.Errorf("%s evidence:\n%s\nwant the ghost 670 named, and not persistenced", f.Kind, ev)
		}
	}
}

// defunct makes a process a zombie, exited and not reaped by its parent. It
// keeps its comm, uid and cgroup, but no exe, maps or fds.
func defunct(p *snapshot.Process) {
	p.State, p.Threads, p.Exe, p.Cmdline = "Z", 1, "", nil
}

// A zombie is no live process. A PID NVML lists under it is an orphan, and
// its memory is not accounted for. A zombie thread-group leader whose other
// threads run is alive.
func TestDefunctProcessIsNotLive(t *testing.T) {
	launcher := proc(2100, 50, "bash", "/usr/bin/bash")
	trainer := proc(7777, 700, "python3", "/usr/bin/python3.11", holder(3, dev0, "rw", dev0No))
	zombie := proc(7777, 700, "python3", "/usr/bin/python3.11", defunct, func(p *snapshot.Process) { p.PPID = 2100 })
	threadsLeft := proc(7777, 700, "python3", "/usr/bin/python3.11", func(p *snapshot.Process) { p.State, p.Threads = "Z", 3 })
	running := proc(7777, 900, "bash", "/usr/bin/bash", func(p *snapshot.Process) { p.State = "S" })
	for _, tc := range []struct {
		name     string
		from, to *snapshot.Snapshot
		want     []string
	}{
		{"a zombie new since FROM",
			withGPUs(snap("a", launcher), gpu(0)),
			withGPUs(snap("b", launcher, zombie), gpu(3*gib, gp(7777, 3*gib))),
			[]string{"orphan_gpu_process high 7777", "zombie_gpu_memory high 0"}},
		{"a process on the GPU at FROM, a zombie at TO",
			withGPUs(snap("a", launcher, trainer), gpu(gib, gp(7777, gib))),
			withGPUs(snap("b", launcher, zombie), gpu(3*gib, gp(7777, 3*gib))),
			[]string{"orphan_gpu_process high 7777", "zombie_gpu_memory high 0"}},
		{"a zombie listed at FROM already",
			withGPUs(snap("a", launcher, zombie), gpu(gib, gp(7777, gib))),
			withGPUs(snap("b", launcher, zombie), gpu(gib, gp(7777, gib))),
			nil},
		{"a zombie listed at FROM, its PID reused since by a process with no device",
			withGPUs(snap("a", launcher, zombie), gpu(gib, gp(7777, gib))),
			withGPUs(snap("b", launcher, running), gpu(gib, gp(7777, gib))),
			nil}, // an orphan at FROM already, older than the tenant, and not the new process's use either
		{"a zombie leader whose threads run",
			withGPUs(snap("a", launcher), gpu(0)),
			withGPUs(snap("b", launcher, threadsLeft), gpu(3*gib, gp(7777, 3*gib))),
			[]string{"unexpected_gpu_process medium 7777"}},
	} {
		t.Run(tc.name, func(t *testing.T) { expect(t, compare(tc.from, tc.to), tc.want...) })
	}

	r := compare(withGPUs(snap("a", launcher), gpu(0)), withGPUs(snap("b", launcher, zombie), gpu(3*gib, gp(7777, 3*gib))))
	expect(t, r, "orphan_gpu_process high 7777", "zombie_gpu_memory high 0")
	orphan, zombieMem := r.Findings[0], r.Findings[1]
	if p := orphan.Process; p.StartTime != 700 || p.Comm != "python3" || p.UID != 1000 {
		t.Errorf("the orphan names %+v, want the zombie 7777@700", p)
	}
	if ev := strings.Join(orphan.Evidence, "\n"); !strings.Contains(ev, "PID 7777 is 7777@700 (python3), defunct (state Z): it has exited and its parent, PID 2100, has not reaped it") {
		t.Errorf("orphan evidence:\n%s", ev)
	}
	if ev := strings.Join(zombieMem.Evidence, "\n"); !strings.Contains(ev, "pid 7777 (python3, 7777@700): defunct (exited, not reaped), not counted: 3221225472 bytes (3.00 GiB)") {
		t.Errorf("zombie evidence:\n%s", ev)
	}
	// Dead at TO, the process FROM saw alive names itself with what a zombie no longer shows.
	r = compare(withGPUs(snap("a", launcher, trainer), gpu(gib, gp(7777, gib))), withGPUs(snap("b", launcher, zombie), gpu(gib, gp(7777, gib))))
	expect(t, r, "orphan_gpu_process high 7777")
	if p := r.Findings[0].Process; p.Exe != "/usr/bin/python3.11" {
		t.Errorf("the orphan names %+v, want FROM's record of 7777@700 with its exe", p)
	}
}

// Joined through NSpid, a PID NVML lists is the live container process that
// has it, not a zombie that has that number in the proc root's own namespace.
func TestNVMLPIDJoinSkipsDefunct(t *testing.T) {
	trainer := proc(4300, 700, "python3", "/usr/bin/python3.11", holder(3, dev0, "rw", dev0No), func(p *snapshot.Process) { p.NSpid = []int{4300, 12} })
	zombie := proc(12, 800, "sh", "/bin/sh", defunct)
	r := compare(withGPUs(snap("a"), gpu(0)), withGPUs(snap("b", trainer, zombie), gpu(gib, gp(12, gib))))
	expect(t, r, "leftover_device_holder high 4300 /dev/nvidia0", "unexpected_gpu_process medium 4300")
}

package diff

import (
	"strings"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/snapshot"
)

func slurmJob(id string) procOpt {
	return func(p *snapshot.Process) {
		p.SlurmJobID = id
		p.Cgroups = []string{"6:freezer:/slurm_node1/uid_1000/job_" + id + "/step_batch"}
	}
}

func ppid(n int) procOpt { return func(p *snapshot.Process) { p.PPID = n } }

func allocated(s *snapshot.Snapshot, tenant, list string) *snapshot.Snapshot {
	set, err := snapshot.ParseGPUList(list)
	if err != nil {
		panic(err)
	}
	s.Tenant, s.Allocation = tenant, &set
	return s
}

func TestOutOfAllocation(t *testing.T) {
	from := allocated(withGPUs(snap("base"), gpuN(0, "GPU-0", 0), gpuN(1, "GPU-1", 0)), "42", "0")
	// The job's step uses its GPU 0 and GPU 1. A child that left the job's
	// cgroup uses GPU 1. Another job's process uses GPU 1, which it was given.
	step := proc(100, 500, "python3", "/usr/bin/python3", slurmJob("42"),
		mapping("/dev/nvidia0", "rw-s", 0x7f0000000000, 1<<21, 0, "195:0"),
		holder(4, "/dev/nvidia1", "rw", "195:1"),
		holder(5, "/dev/nvidiactl", "rw", "195:255"))
	escaped := proc(101, 510, "worker", "/usr/bin/python3", ppid(100), cgroups("0::/"),
		mapping("/dev/nvidia1", "rw-s", 0x7f0000000000, 1<<21, 0, "195:1"))
	other := proc(200, 520, "python3", "/usr/bin/python3", slurmJob("43"), holder(4, "/dev/nvidia1", "rw", "195:1"))
	listed := proc(102, 530, "cuda", "/opt/cuda-app", ppid(101))
	to := withGPUs(snap("post", step, escaped, other, listed), gpuN(0, "GPU-0", 1<<30), gpuN(1, "GPU-1", 2<<30, gp(102, 1<<30), gp(200, 1<<30)))
	r := Compare(from, to, Options{ZombieThreshold: DefaultZombieThreshold})
	var alloc []string
	for _, l := range got(r) {
		if strings.HasPrefix(l, KindOutOfAllocation) {
			alloc = append(alloc, l)
		}
	}
	want := []string{
		"out_of_allocation_gpu_use high 100 /dev/nvidia1",
		"out_of_allocation_gpu_use high 101 /dev/nvidia1",
		"out_of_allocation_gpu_use high 102",
	}
	if strings.Join(alloc, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(alloc, "\n"), strings.Join(want, "\n"))
	}
	for _, f := range r.Findings {
		if f.Kind != KindOutOfAllocation {
			continue
		}
		ev := strings.Join(f.Evidence, "\n")
		if !strings.Contains(ev, "allocation of 42: 0") {
			t.Errorf("pid %d evidence lacks the allocation: %s", f.Process.PID, ev)
		}
		if f.Process.PID == 102 && !strings.Contains(ev, "descends from 100@500 (python3): its cgroup is slurm job 42's") {
			t.Errorf("pid 102 evidence lacks its ancestry: %s", ev)
		}
		if f.Process.PID == 100 && !strings.Contains(f.Summary, "slurm job 42") {
			t.Errorf("summary does not name the job: %s", f.Summary)
		}
	}

	// With no allocation recorded, or no tenant, the rule says nothing.
	from.Allocation = nil
	for _, f := range Compare(from, to, Options{}).Findings {
		if f.Kind == KindOutOfAllocation {
			t.Errorf("raised without an allocation: %s", f.Summary)
		}
	}
}

// In TestOutOfAllocationHistory the child's parent is gone at TO, where the
// child is reparented to init. A snapshot taken while the job ran links them.
func TestOutOfAllocationHistory(t *testing.T) {
	from := allocated(snap("base"), "42", "") // a job given no GPU
	step := proc(100, 500, "bash", "/usr/bin/bash", slurmJob("42"))
	child := proc(101, 510, "ghost", "/usr/bin/python3", ppid(100), mapping("/dev/nvidia3", "rw-s", 0x7f0000000000, 1<<21, 0, "195:3"))
	during := snap("during", step, child)
	orphan := child
	orphan.PPID = 1
	to := snap("post", orphan)
	if r := Compare(from, to, Options{}); strings.Contains(strings.Join(got(r), "\n"), KindOutOfAllocation) {
		t.Errorf("without history, nothing links the child to the job: %v", got(r))
	}
	r := Compare(from, to, Options{History: []*snapshot.Snapshot{during}})
	found := false
	for _, f := range r.Findings {
		if f.Kind == KindOutOfAllocation && f.Process.PID == 101 {
			found = true
			if !strings.Contains(strings.Join(f.Evidence, "\n"), "snapshot during") || !strings.Contains(f.Summary, "allocation of 42 (no GPU)") {
				t.Errorf("finding: %+v", f)
			}
		}
	}
	if !found {
		t.Errorf("history: %v", got(r))
	}
}

func TestTenantMembersCycle(t *testing.T) {
	// A damaged tree whose PPIDs loop ends, and names no one.
	a := proc(10, 5, "a", "/a", ppid(11))
	b := proc(11, 5, "b", "/b", ppid(10))
	if m := tenantMembers("42", snap("x", a, b)); len(m) != 0 {
		t.Errorf("members: %v", m)
	}
	if m := tenantMembers("", snap("x", proc(10, 5, "a", "/a"))); len(m) != 0 {
		t.Errorf("empty tenant has members: %v", m)
	}
}

// In TestOutOfAllocationEvents a process of the job opened GPU 1, which it was
// not given, and left before TO. Only the event log saw it. A process of the
// job that used its own GPU 0, and another job's on GPU 1, are not out of the
// job's allocation.
func TestOutOfAllocationEvents(t *testing.T) {
	from := allocated(withGPUs(snap("base"), gpuN(0, "GPU-0", 0), gpuN(1, "GPU-1", 0)), "42", "0")
	to := withGPUs(snap("post"), gpuN(0, "GPU-0", 0), gpuN(1, "GPU-1", 0))
	to.Host.CaptureEnd = t0.Add(time.Hour + time.Second)
	gpu := func(e eventlog.Event, minor int) eventlog.Event { e.Device.GPU = &minor; return e }
	worker := &eventlog.Process{PID: 700, StartTime: 9700, Comm: "python3", Exe: "/usr/bin/python3", SlurmJobID: "42"}
	own := &eventlog.Process{PID: 701, StartTime: 9701, Comm: "python3", Exe: "/usr/bin/python3", SlurmJobID: "42"}
	other := &eventlog.Process{PID: 800, StartTime: 9800, Comm: "python3", Exe: "/usr/bin/python3", SlurmJobID: "43"}
	events := eventsOf(
		gpu(devEvent(time.Minute, eventlog.KindOpen, worker, "/dev/nvidia1", "rw", ""), 1),
		gpu(devEvent(time.Minute, eventlog.KindMmap, worker, "/dev/nvidia1", "", "rw-s"), 1),
		gpu(devEvent(2*time.Minute, eventlog.KindOpen, own, "/dev/nvidia0", "rw", ""), 0),
		gpu(devEvent(3*time.Minute, eventlog.KindOpen, other, "/dev/nvidia1", "rw", ""), 1),
	)
	r := compareWindow(Options{Events: events}, from, to)
	var alloc []*Finding
	for i := range r.Findings {
		if r.Findings[i].Kind == KindOutOfAllocation {
			alloc = append(alloc, &r.Findings[i])
		}
	}
	if len(alloc) != 1 || alloc[0].Process.PID != 700 || alloc[0].Severity != High || alloc[0].GPUUUID != "GPU-1" ||
		!strings.Contains(alloc[0].Summary, "event log") || !strings.Contains(strings.Join(alloc[0].Evidence, "\n"), "slurm job 42") {
		t.Fatalf("got %q", got(r))
	}
}

package diff

import (
	"strings"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/snapshot"
)

// accountingGPU is GPU 0 with accounting on and the given records.
func accountingGPU(records ...snapshot.AccountingStats) snapshot.GPU {
	g := gpu(0)
	g.AccountingMode = snapshot.AccountingEnabled
	g.Accounting = records
	return g
}

func record(pid int, start time.Time, ran time.Duration, running bool) snapshot.AccountingStats {
	return snapshot.AccountingStats{PID: pid, StartTime: uint64(start.UnixMicro()), Time: uint64(ran.Milliseconds()),
		MaxMemoryUsage: u64(20 << 30), GPUUtilization: u32(97), IsRunning: running}
}

// NVML's accounting names what ran between the snapshots and left, the
// process that started and ended in the window and one that started before
// FROM and ended in it. It names none that ended before FROM, none alive at
// TO and none that started after TO.
func TestTransientFromAccounting(t *testing.T) {
	from, to := snap("a"), snap("b")
	to.Host.CaptureStart = t0.Add(time.Hour)
	alive := proc(812, 50, "python3", "/usr/bin/python3")
	alive.Started = t0.Add(10 * time.Minute)
	miner := proc(7001, 60, "xmrig", "/tmp/.x/xmrig") // seen while it ran, in the tenant's history
	miner.Started = t0.Add(20 * time.Minute)
	reused := proc(7003, 999, "bash", "/usr/bin/bash") // PID 7003 now another process
	reused.Started = t0.Add(50 * time.Minute)
	to.Processes = []snapshot.Process{alive, reused}
	g := accountingGPU(
		record(7001, t0.Add(20*time.Minute), 90*time.Second, false),
		record(7002, t0.Add(-2*time.Hour), 30*time.Minute, false),    // ended before FROM
		record(812, t0.Add(10*time.Minute), 5*time.Minute, true),     // alive at TO
		record(7003, t0.Add(-10*time.Minute), 15*time.Minute, false), // started before FROM, ended in the window
		record(7004, t0.Add(2*time.Hour), time.Minute, false),        // after TO
	)
	withGPUs(from, gpu(0))
	withGPUs(to, g)
	r := Compare(from, to, Options{History: []*snapshot.Snapshot{snap("during", miner)}})
	expect(t, r, "transient_gpu_process high 7001", "transient_gpu_process medium 7003")
	f := r.Findings[0]
	if f.GPUUUID != "GPU-0" || f.Process.StartTime != 60 || f.Time == nil || !f.Time.Equal(t0.Add(20*time.Minute)) ||
		!strings.Contains(f.Summary, "ran 1m30s, max memory 21474836480 bytes (20.00 GiB), GPU utilization 97%, memory utilization not available") {
		t.Errorf("the miner: %+v", f)
	}
	if f := r.Findings[1]; f.Process.UID != -1 || !strings.Contains(strings.Join(f.Evidence, "\n"), "no snapshot of the window has PID 7003 started then") {
		t.Errorf("PID 7003 is another process at TO: %+v", f)
	}
}

// A process in no snapshot, which NVML's accounting and the event log both
// name (same PID, starts within the clocks' slack), is one finding, with the
// event log's identity, the accounting figures and both sources' evidence.
func TestTransientAccountingAndEventsOneFinding(t *testing.T) {
	boot, started, ticks, worker := transientWorker()
	events := eventsOf(devEvent(10*time.Minute+time.Second, eventlog.KindOpen, worker, "/dev/nvidia0", "rw", ""))
	from, to := snap("a"), snap("b")
	to.Host.BootTime = boot
	withGPUs(from, gpu(0))
	// NVML's clock is a little off the kernel's, and it is still the same start.
	withGPUs(to, accountingGPU(record(7100, started.Add(700*time.Millisecond), 2*time.Minute, false)))
	r := compareWindow(Options{Events: events}, from, to)
	expect(t, r, "transient_gpu_process medium 7100 /dev/nvidia0")
	f := r.Findings[0]
	ev := strings.Join(f.Evidence, "\n")
	if f.Process.StartTime != ticks || f.Process.Comm != "python3" || !strings.Contains(ev, "nvml accounting") || !strings.Contains(ev, "event: ") {
		t.Errorf("want the event log's identity and both sources: %+v", f)
	}
}

// Accounting names the process on GPU 0, the event log its open of
// /dev/nvidia3 (GPU 3). That gives two findings, each of its GPU, not one that names
// GPU 0 and /dev/nvidia3 together.
func TestTransientAccountingAndEventsOfOtherGPUs(t *testing.T) {
	boot, started, _, worker := transientWorker()
	open3 := devEvent(10*time.Minute+time.Second, eventlog.KindOpen, worker, "/dev/nvidia3", "rw", "")
	open3.Device.Number, open3.Device.GPU = "195:3", intp(3)
	events := eventsOf(open3)
	from, to := snap("a"), snap("b")
	to.Host.BootTime = boot
	gpu3 := gpu(0)
	gpu3.Index, gpu3.UUID, gpu3.MinorNumber = 3, "GPU-3", intp(3)
	withGPUs(from, gpu(0), gpu3)
	withGPUs(to, accountingGPU(record(7100, started, 2*time.Minute, false)), gpu3)
	r := compareWindow(Options{Events: events}, from, to)
	expect(t, r, "transient_gpu_process medium 7100", "transient_gpu_process medium 7100 /dev/nvidia3")
	for _, f := range r.Findings {
		if want := map[string]string{"": "GPU-0", "/dev/nvidia3": "GPU-3"}[f.Device]; f.GPUUUID != want {
			t.Errorf("%s: gpu %s, want %s", f.Summary, f.GPUUUID, want)
		}
	}
}

// transientWorker is a process that started 10 minutes into the window and
// is in no snapshot. It returns the host's boot, its start, its start in
// clock ticks, and the event log's record of it.
func transientWorker() (boot, started time.Time, ticks uint64, worker *eventlog.Process) {
	boot = t0.Add(-24 * time.Hour)
	started = t0.Add(10 * time.Minute)
	ticks = uint64(started.Sub(boot) / (10 * time.Millisecond))
	return boot, started, ticks, &eventlog.Process{PID: 7100, StartTime: ticks, Comm: "python3", Exe: "/usr/bin/python3.11", UID: 1000}
}

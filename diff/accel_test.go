package diff

import (
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/snapshot"
)

const (
	render    = "/dev/dri/renderD128"
	renderNo  = "226:128"
	card      = "/dev/dri/card1"
	cardNo    = "226:1"
	kfdPath   = "/dev/kfd"
	kfdNo     = "235:0"
	mi300Slot = "0000:03:00.0"
)

// mi300 is a host's accelerators, one AMD GPU with VRAM figures, served by
// KFD as gpu_id 4711, and the KFD processes given.
func mi300(used uint64, kfd ...snapshot.KFDProcess) *snapshot.Accelerators {
	return &snapshot.Accelerators{
		SysRoot: "/sys",
		KFDNode: deviceNumber(kfdNo),
		Devices: []snapshot.Accelerator{{Vendor: "amd", Driver: "amdgpu", PCISlot: mi300Slot, Name: mi300Slot,
			Nodes:    []snapshot.AccelNode{{Path: card, DeviceNumber: deviceNumber(cardNo), Kind: snapshot.NodeCard}, {Path: render, DeviceNumber: deviceNumber(renderNo), Kind: snapshot.NodeRender}},
			KFDGPUID: 4711, MemoryTotal: u64(192 << 30), MemoryUsed: u64(used)}},
		KFDProcesses: kfd,
	}
}

func withAccel(s *snapshot.Snapshot, a *snapshot.Accelerators) *snapshot.Snapshot {
	s.Accelerators = a
	return s
}

// client gives a process a DRM client on node with vram bytes of device
// memory and busy nanoseconds on the gfx engine.
func client(node string, id, vram, busy uint64, fds ...int) procOpt {
	return func(p *snapshot.Process) {
		c := snapshot.DRMClient{ClientID: id, Driver: "amdgpu", PCISlot: mi300Slot, Node: node, FDs: fds,
			Memory:  []snapshot.DRMMemory{{Region: "vram", Total: vram, Resident: vram, Device: true}, {Region: "gtt", Total: 2 << 20}},
			Engines: []snapshot.DRMEngine{{Name: "gfx", BusyNS: busy}}}
		p.DRMClients = append(p.DRMClients, c)
	}
}

func kfdProc(pid int, vram uint64) snapshot.KFDProcess {
	return snapshot.KFDProcess{PID: pid, VRAM: []snapshot.KFDMemory{{GPUID: 4711, Bytes: vram}}}
}

// A ROCm worker left behind holds and maps /dev/kfd and works on the render
// node. Each is a high leftover, since KFD is compute and the render node
// has its memory and engine time.
func TestAccelLeftoverWorker(t *testing.T) {
	w := proc(5150, 900, "python3", "/usr/bin/python3.11",
		holder(3, kfdPath, "rw", kfdNo), holder(4, render, "rw", renderNo), holder(5, render, "rw", renderNo),
		mapping(kfdPath, "rw-s", 0x7f0000000000, pageLen, 0, kfdNo),
		mapping(render, "rw-s", 0x7f1000000000, pageLen, 0, renderNo),
		client(render, 12, 8<<30, 1234567, 4, 5))
	from := withAccel(snap("a"), mi300(512<<20))
	to := withAccel(snap("b", w), mi300(512<<20+114<<30, kfdProc(5150, 114<<30)))
	r := compare(from, to)
	expect(t, r,
		"leftover_device_holder high 5150 /dev/dri/renderD128",
		"leftover_device_holder high 5150 /dev/kfd",
		"leftover_device_mapping high 5150 /dev/dri/renderD128",
		"leftover_device_mapping high 5150 /dev/kfd",
		"unexpected_gpu_process medium 5150")
	if ev := strings.Join(r.Findings[4].Evidence, "\n"); !strings.Contains(ev, "holds /dev/kfd (1 descriptor)") || !strings.Contains(ev, "engine gfx 1234567 ns") {
		t.Errorf("unexpected's evidence: %s", ev)
	}
	ev := strings.Join(r.Findings[0].Evidence, "\n")
	if !strings.Contains(ev, "drm client 12 of amdgpu on 0000:03:00.0, vram 8589934592 bytes (8.00 GiB)") || !strings.Contains(ev, "engine gfx 1234567 ns") {
		t.Errorf("render evidence: %s", ev)
	}
	if ev := strings.Join(r.Findings[1].Evidence, "\n"); !strings.Contains(ev, "kfd: vram 122406567936 bytes (114.00 GiB) on gpu_id 4711") {
		t.Errorf("kfd evidence: %s", ev)
	}
}

// The field's trap is a browser new since FROM that holds and maps the
// render node with no device memory and no engine time. It raises a low
// holder finding and the low other_device_mapping, never a GPU leftover. A
// compositor holding the primary node raises only its mapping's low
// finding, and one alive and unchanged at both ends raises nothing.
func TestAccelHolderIsNotWork(t *testing.T) {
	browser := proc(6100, 950, "chromium", "/usr/lib/chromium/chromium",
		holder(7, render, "rw", renderNo), mapping(render, "rw-s", 0x7f2000000000, pageLen, 0, renderNo),
		client(render, 30, 0, 0, 7))
	compositor := proc(6200, 960, "Xwayland", "/usr/bin/Xwayland", holder(3, card, "rw", cardNo))
	desktop := proc(700, 10, "kwin_wayland", "/usr/bin/kwin_wayland", holder(3, render, "rw", renderNo), client(render, 2, 64<<20, 99, 3))
	from := withAccel(snap("a", desktop), mi300(512<<20))
	to := withAccel(snap("b", desktop, browser, compositor), mi300(512<<20))
	expect(t, compare(from, to),
		"leftover_device_holder low 6100 /dev/dri/renderD128",
		"other_device_mapping low 6100 /dev/dri/renderD128")
	// The same browser with engine time is GPU work, and a GPU process new
	// since FROM.
	busy := proc(6100, 950, "chromium", "/usr/lib/chromium/chromium", holder(7, render, "rw", renderNo), client(render, 30, 0, 5, 7))
	expect(t, compare(from, withAccel(snap("b", desktop, busy), mi300(512<<20))),
		"leftover_device_holder high 6100 /dev/dri/renderD128", "unexpected_gpu_process medium 6100")
}

// VRAM that no process accounts for is used (sysfs) less the live
// processes' KFD and fdinfo memory, compared with FROM, against the
// threshold. A client shared by two processes counts once, and a KFD
// process that is gone accounts for nothing.
func TestAccelUnaccountedMemory(t *testing.T) {
	base := uint64(512 << 20)
	live := proc(5150, 900, "python3", "/usr/bin/python3.11", holder(3, kfdPath, "rw", kfdNo))
	from := withAccel(snap("a", live), mi300(base+10<<30, kfdProc(5150, 10<<30)))
	// Below the line, the live process accounts for all but 32 MiB.
	to := withAccel(snap("b", live), mi300(base+10<<30+32<<20, kfdProc(5150, 10<<30)))
	expect(t, compare(from, to))
	// Above it are 114 GiB of a process that left (its KFD entry stays).
	to = withAccel(snap("b", live), mi300(base+124<<30, kfdProc(5150, 10<<30), kfdProc(5999, 114<<30)))
	r := compare(from, to)
	expect(t, r, "orphan_gpu_process high 5999 "+mi300Slot, "zombie_gpu_memory high 0 "+mi300Slot)
	if !strings.Contains(r.Findings[1].Summary, "(114.00 GiB) more than at FROM") {
		t.Errorf("summary: %s", r.Findings[1].Summary)
	}
	// One client in two processes (an fd passed over a socket) counts once.
	a := proc(5150, 900, "python3", "/usr/bin/python3.11", holder(3, render, "rw", renderNo), client(render, 12, 20<<30, 1, 3))
	b := proc(5151, 901, "python3", "/usr/bin/python3.11", holder(4, render, "rw", renderNo), client(render, 12, 20<<30, 1, 4))
	from = withAccel(snap("a", a, b), mi300(base+20<<30))
	to = withAccel(snap("b", a, b), mi300(base+40<<30))
	expect(t, compare(from, to), "zombie_gpu_memory high 0 "+mi300Slot)
}

// In a check a working process is gpu_in_use high, one that only holds a
// render node low (not failing the gate), and unaccounted memory above the
// threshold fails it.
func TestAccelCheck(t *testing.T) {
	w := proc(5150, 900, "python3", "/usr/bin/python3.11", holder(3, kfdPath, "rw", kfdNo))
	browser := proc(6100, 950, "chromium", "/usr/lib/chromium/chromium", holder(7, render, "rw", renderNo))
	s := withAccel(snap("b", w, browser), mi300(40<<20, kfdProc(5150, 8<<20)))
	r := Check(s, CheckOptions{ZombieThreshold: DefaultZombieThreshold, FailOn: AtLeast(Medium)})
	expect(t, r, "gpu_in_use high 5150 /dev/kfd", "gpu_in_use low 6100 /dev/dri/renderD128")
	if !strings.Contains(r.Findings[1].Summary, "amd 0000:03:00.0, no device memory or engine time") {
		t.Errorf("summary: %s", r.Findings[1].Summary)
	}
	r = Check(withAccel(snap("b", browser), mi300(1<<30)), CheckOptions{ZombieThreshold: DefaultZombieThreshold, FailOn: AtLeast(Medium)})
	expect(t, r, "zombie_gpu_memory high 0 "+mi300Slot, "gpu_in_use low 6100 /dev/dri/renderD128")
	if r.Check.Verdict != VerdictNotClean {
		t.Errorf("verdict %s", r.Check.Verdict)
	}
	r = Check(withAccel(snap("b", browser), mi300(1<<30)), CheckOptions{ZombieThreshold: 2 << 30, FailOn: AtLeast(Medium)})
	if r.Check.Verdict != VerdictClean {
		t.Errorf("verdict %s: %v", r.Check.Verdict, got(r))
	}
}

// KFD keeps a process's compute context, and its VRAM, until the kernel
// releases it. An entry under a PID that no live process has, or a
// zombie has, is an orphan, once per GPU it holds memory on. An entry
// already orphaned at FROM predates the tenant, a live process's entry is
// its own, and an unreadable PID may be alive.
func TestAccelKFDOrphan(t *testing.T) {
	worker := proc(5150, 900, "python3", "/usr/bin/python3.11", holder(3, kfdPath, "rw", kfdNo))
	from := withAccel(snap("a", worker), mi300(20<<30, kfdProc(5150, 8<<30)))
	to := withAccel(snap("b", worker), mi300(20<<30, kfdProc(5150, 8<<30)))
	expect(t, compare(from, to))

	// The worker exited. KFD still lists it, and its memory is no live
	// process's.
	to = withAccel(snap("b"), mi300(20<<30, kfdProc(5150, 8<<30)))
	r := compare(from, to)
	expect(t, r, "orphan_gpu_process high 5150 "+mi300Slot, "zombie_gpu_memory high 0 "+mi300Slot)
	f := r.Findings[0]
	if f.Summary != "KFD serves pid 5150 on amd 0000:03:00.0, which no live process accounts for" {
		t.Errorf("summary: %s", f.Summary)
	}
	ev := strings.Join(f.Evidence, "\n")
	for _, want := range []string{"kfd: proc/5150/vram_4711: 8589934592 bytes (8.00 GiB)", "no live process has this PID at TO", "at FROM PID 5150 was 5150@900 (python3"} {
		if !strings.Contains(ev, want) {
			t.Errorf("evidence lacks %q:\n%s", want, ev)
		}
	}
	if f.Process == nil || f.Process.Comm != "python3" || f.Triage == nil || f.Triage.Class != ClassZombieContext ||
		!strings.Contains(f.Triage.Next, "amd-smi") {
		t.Errorf("process %+v triage %+v", f.Process, f.Triage)
	}

	// A zombie keeps no context, and one with no vram file names /dev/kfd.
	z := proc(5150, 900, "python3", "/usr/bin/python3.11", defunct)
	to = withAccel(snap("b", z), mi300(20<<30, snapshot.KFDProcess{PID: 5150}))
	r = compare(from, to)
	expect(t, r, "orphan_gpu_process high 5150 /dev/kfd", "zombie_gpu_memory high 0 "+mi300Slot)
	if ev := strings.Join(r.Findings[0].Evidence, "\n"); !strings.Contains(ev, "defunct (state Z)") || !strings.Contains(ev, "lists no vram file") {
		t.Errorf("evidence: %s", ev)
	}

	// Orphaned at FROM already, so not the tenant's.
	stale := withAccel(snap("a"), mi300(20<<30, kfdProc(5999, 8<<30)))
	expect(t, compare(stale, withAccel(snap("b"), mi300(20<<30, kfdProc(5999, 8<<30)))))

	// Unreadable at TO, so maybe alive (memory as at FROM).
	to = withAccel(snap("b"), mi300(12<<30, kfdProc(5150, 8<<30)))
	to.Scan.RefusedPIDs = []int{5150}
	expect(t, compare(from, to))
}

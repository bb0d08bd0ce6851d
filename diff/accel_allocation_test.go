package diff

import (
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/snapshot"
)

const (
	render2   = "/dev/dri/renderD129"
	render2No = "226:129"
	mi300b    = "0000:83:00.0"
)

// twoMI300 is mi300 with a second GPU, amd:1 at 0000:83:00.0 (KFD gpu_id
// 4712, render node renderD129).
func twoMI300(kfd ...snapshot.KFDProcess) *snapshot.Accelerators {
	a := mi300(1<<30, kfd...)
	a.Devices[0].IDs = []string{"amd:0", mi300Slot, "card1"}
	a.Devices = append(a.Devices, snapshot.Accelerator{Vendor: "amd", Driver: "amdgpu", PCISlot: mi300b, Name: mi300b,
		Nodes:    []snapshot.AccelNode{{Path: render2, DeviceNumber: deviceNumber(render2No), Kind: snapshot.NodeRender}},
		KFDGPUID: 4712, IDs: []string{"amd:1", mi300b, "card2"}})
	return a
}

// kinds keeps the findings of kind.
func kinds(r *Result, kind string) []string {
	var out []string
	for _, l := range got(r) {
		if strings.HasPrefix(l, kind+" ") {
			out = append(out, l)
		}
	}
	return out
}

// A job given amd:0 works on amd:1, through its render node (engine time in
// fdinfo) or through KFD (memory on gpu_id 4712). Each is outside the
// allocation. Work on amd:0 is not, nor is merely holding amd:1's render
// node (a browser of the job).
func TestAccelOutOfAllocation(t *testing.T) {
	onRender := proc(100, 500, "python3", "/usr/bin/python3", slurmJob("42"),
		holder(4, render2, "rw", render2No), client(render2, 7, 0, 999, 4))
	onKFD := proc(101, 510, "python3", "/usr/bin/python3", slurmJob("42"), holder(3, kfdPath, "rw", kfdNo))
	onOwn := proc(102, 520, "python3", "/usr/bin/python3", slurmJob("42"),
		holder(4, render, "rw", renderNo), client(render, 8, 1<<30, 5, 4), holder(3, kfdPath, "rw", kfdNo))
	browser := proc(103, 530, "chromium", "/usr/lib/chromium/chromium", slurmJob("42"), holder(7, render2, "rw", render2No))
	kfd := []snapshot.KFDProcess{{PID: 101, VRAM: []snapshot.KFDMemory{{GPUID: 4711, Bytes: 0}, {GPUID: 4712, Bytes: 2 << 30}}},
		kfdProc(102, 4<<30)}
	from := allocated(withAccel(snap("a"), twoMI300()), "42", "amd:0")
	to := withAccel(snap("b", onRender, onKFD, onOwn, browser), twoMI300(kfd...))
	r := compare(from, to)
	want := []string{
		"out_of_allocation_gpu_use high 100 /dev/dri/renderD129",
		"out_of_allocation_gpu_use high 101 /dev/kfd",
	}
	if g := kinds(r, KindOutOfAllocation); strings.Join(g, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(g, "\n"), strings.Join(want, "\n"))
	}
	f := r.Findings[0]
	for _, f2 := range r.Findings {
		if f2.Kind == KindOutOfAllocation {
			f = f2
			break
		}
	}
	ev := strings.Join(f.Evidence, "\n")
	if !strings.Contains(f.Summary, "works on amd 0000:83:00.0 through /dev/dri/renderD129, outside the allocation of 42 (amd:0)") ||
		!strings.Contains(ev, "device: amd 0000:83:00.0, ids amd:1, 0000:83:00.0, card2") || !strings.Contains(ev, "engine gfx 999 ns") {
		t.Errorf("summary %q evidence:\n%s", f.Summary, ev)
	}

	// Given both by PCI slot and card name, nothing is outside.
	both := allocated(withAccel(snap("a"), twoMI300()), "42", "card1,"+mi300b)
	if g := kinds(compare(both, to), KindOutOfAllocation); len(g) != 0 {
		t.Errorf("both given: %q", g)
	}

	// Given no GPU, every device worked on is outside, once per process
	// and device (102 works on amd:0 through its render node and KFD).
	none := allocated(withAccel(snap("a"), twoMI300()), "42", "")
	if g := kinds(compare(none, to), KindOutOfAllocation); len(g) != 3 {
		t.Errorf("none given: %q", g)
	}

	// Given NVIDIA's GPU 0 on a host whose NVML shows it, the AMD devices
	// are outside. Where NVML shows no GPU, "0" may be a Slurm index of an
	// AMD device, so it is not judged, and the result says so.
	mixed := allocated(withGPUs(withAccel(snap("a"), twoMI300()), gpuN(0, "GPU-0", 0)), "42", "0")
	if g := kinds(compare(mixed, withGPUs(to, gpuN(0, "GPU-0", 0))), KindOutOfAllocation); len(g) != 3 {
		t.Errorf("mixed host: %q", g)
	}
	to.NVML.Devices = nil
	slurm := allocated(withAccel(snap("a"), twoMI300()), "42", "0")
	r = compare(slurm, to)
	if g := kinds(r, KindOutOfAllocation); len(g) != 0 || r.Complete ||
		!strings.Contains(strings.Join(r.Notes, "\n"), "names GPU numbers that NVML did not show: other vendors' accelerators were not judged") {
		t.Errorf("slurm index: %q complete %v notes %q", g, r.Complete, r.Notes)
	}

	// An ID no device has is said.
	r = compare(allocated(withAccel(snap("a"), twoMI300()), "42", "amd:0,amd:5"), to)
	if !strings.Contains(strings.Join(r.Notes, "\n"), "names amd:5, which no accelerator read from the sys root has") {
		t.Errorf("notes: %q", r.Notes)
	}
}

// check --gpus by accelerator ID judges only the devices named. An ID no
// device has is unchecked, so the gate cannot say clean.
func TestAccelCheckByID(t *testing.T) {
	onRender := proc(100, 500, "python3", "/usr/bin/python3", holder(4, render2, "rw", render2No), client(render2, 7, 0, 999, 4))
	onKFD := proc(101, 510, "python3", "/usr/bin/python3", holder(3, kfdPath, "rw", kfdNo))
	browser := proc(103, 530, "chromium", "/usr/lib/chromium/chromium", holder(7, render, "rw", renderNo))
	s := withAccel(snap("b", onRender, onKFD, browser), twoMI300(kfdProc(101, 2<<30)))
	check := func(list string) *Result {
		set, err := snapshot.ParseGPUList(list)
		if err != nil {
			t.Fatal(err)
		}
		return Check(s, CheckOptions{GPUs: &set, ZombieThreshold: DefaultZombieThreshold, FailOn: AtLeast(Medium)})
	}
	r := check("amd:1")
	expect(t, r, "gpu_in_use high 100 /dev/dri/renderD129")
	if r.Check.Verdict != VerdictNotClean {
		t.Errorf("verdict %s", r.Check.Verdict)
	}
	r = check(mi300Slot)
	expect(t, r, "gpu_in_use high 101 /dev/kfd", "gpu_in_use low 103 /dev/dri/renderD128")
	r = check("amd:7")
	expect(t, r)
	if r.Check.Verdict != VerdictUnknown || len(r.Check.Unchecked) != 1 || !strings.Contains(r.Check.Unchecked[0], "amd:7: no accelerator read from /sys has this ID") {
		t.Errorf("verdict %s unchecked %q", r.Check.Verdict, r.Check.Unchecked)
	}
}

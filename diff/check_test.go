package diff

import (
	"slices"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/snapshot"
)

func gpuN(n int, uuid string, used uint64, procs ...snapshot.GPUProcess) snapshot.GPU {
	g := gpu(used, procs...)
	g.Index, g.UUID, g.MinorNumber = n, uuid, intp(n)
	return g
}

func check(t *testing.T, to *snapshot.Snapshot, list string, allow string) *Result {
	t.Helper()
	opts := CheckOptions{ZombieThreshold: DefaultZombieThreshold}
	if list != "" {
		s, err := snapshot.ParseGPUList(list)
		if err != nil {
			t.Fatal(err)
		}
		opts.GPUs = &s
	}
	if allow != "" {
		a, err := ParseAllow(strings.NewReader(allow), "allow")
		if err != nil {
			t.Fatal(err)
		}
		opts.Allow = a
	}
	return Check(to, opts)
}

func TestCheckCleanHost(t *testing.T) {
	to := withGPUs(snap("now", proc(10, 5, "bash", "/usr/bin/bash")), gpuN(0, "GPU-0", 1<<20))
	r := check(t, to, "", "")
	expect(t, r)
	if r.Failed(Medium) || r.Check == nil || r.Check.GPUs != "all" || len(r.Check.Unchecked) > 0 {
		t.Errorf("clean host: %+v", r.Check)
	}
}

func TestCheckGPUInUse(t *testing.T) {
	ghost := proc(4243, 900, "python3", "/usr/bin/python3.11",
		mapping("/dev/nvidia1", "rw-s", 0x7f0000000000, 1<<21, 0, "195:1"),
		holder(5, "/dev/nvidia1", "rw", "195:1"),
		holder(6, "/dev/nvidiactl", "rw", "195:255"))
	listed := proc(5000, 950, "trainer", "/opt/trainer")
	persist := proc(300, 10, "nvidia-persiste", "/usr/bin/nvidia-persistenced", holder(3, "/dev/nvidia0", "rw", "195:0"))
	to := withGPUs(snap("now", ghost, listed, persist),
		gpuN(0, "GPU-0", 1<<20), gpuN(1, "GPU-1", 8<<30+1<<20, gp(5000, 8<<30)))

	// Every GPU takes the ghost's GPU node and nvidiactl, the NVML listing and persistenced.
	expect(t, check(t, to, "", ""),
		"gpu_in_use high 300 /dev/nvidia0",
		"gpu_in_use high 4243 /dev/nvidia1",
		"gpu_in_use high 4243 /dev/nvidiactl",
		"gpu_in_use high 5000")
	// For GPU 0 only, nvidiactl names no GPU, and persistenced is allowed.
	r := check(t, to, "0", "exe=/usr/bin/nvidia-persistenced\n")
	expect(t, r, "gpu_in_use info 300 /dev/nvidia0")
	if r.Failed(Medium) {
		t.Error("an allowed holder failed the check")
	}
	// GPU 1 by UUID reaches the device node through NVML's minor number.
	expect(t, check(t, to, "GPU-1", ""),
		"gpu_in_use high 4243 /dev/nvidia1",
		"gpu_in_use high 5000")
	// Zombie memory, as GPU 1 uses 8 GiB that NVML lists no process for.
	to.NVML.Devices[1].ComputeProcesses = nil
	expect(t, check(t, to, "1", ""),
		"gpu_in_use high 4243 /dev/nvidia1",
		"zombie_gpu_memory high 0")
	expect(t, check(t, to, "0", ""), "gpu_in_use high 300 /dev/nvidia0")
	for _, f := range check(t, to, "1", "").Findings {
		if f.Kind == KindZombieGPUMemory && (f.Summary != "GPU GPU-1 holds 8590983168 bytes (8.00 GiB) that no live process accounts for" ||
			strings.Contains(strings.Join(f.Evidence, "\n"), "at FROM")) {
			t.Errorf("a check's zombie speaks of a FROM it has not: %s %q", f.Summary, f.Evidence)
		}
	}
}

func TestCheckFailsClosed(t *testing.T) {
	to := withGPUs(snap("now"), gpuN(0, "GPU-0", 0))
	to.NVML.Devices[0].Memory = nil
	r := check(t, to, "0-1,GPU-9", "")
	want := []string{
		"GPU-9: NVML does not show it, so no device node can be matched to it",
		"GPU 0 (GPU-0): NVML gave no memory figure",
		"GPU 1: NVML does not show it",
	}
	if strings.Join(r.Check.Unchecked, "\n") != strings.Join(want, "\n") {
		t.Errorf("unchecked:\n%s\nwant:\n%s", strings.Join(r.Check.Unchecked, "\n"), strings.Join(want, "\n"))
	}
	// Without NVML a GPU named by number is checked by its node, where the
	// host shows one. By UUID it cannot be.
	to.NVML = snapshot.NVML{Source: "library", Unavailable: "library not found"}
	to.Host.GPUNodes = []int{0}
	r = check(t, to, "0,GPU-9", "")
	if len(r.Check.Unchecked) != 1 || !strings.Contains(r.Check.Unchecked[0], "NVML was not read") || r.Check.Verdict != VerdictUnknown {
		t.Errorf("unchecked without NVML: %q, verdict %q", r.Check.Unchecked, r.Check.Verdict)
	}
	// A GPU no node shows and no NVML lists was not seen at all.
	to.Host.GPUNodes = nil
	r = check(t, to, "0", "")
	want = []string{"GPU 0: no device node of it was seen and NVML was not read (library not found)"}
	if !slices.Equal(r.Check.Unchecked, want) || r.Check.Verdict != VerdictUnknown {
		t.Errorf("unseen GPU 0: unchecked %q, verdict %q", r.Check.Unchecked, r.Check.Verdict)
	}
}

// A check of every GPU where NVML was not read and no GPU was seen is clean
// only where /proc/devices shows the NVIDIA driver not loaded. Elsewhere
// the driver may hold GPUs nothing showed, and the check cannot tell.
func TestCheckAllWithNoGPUSeen(t *testing.T) {
	bash := proc(10, 5, "bash", "/usr/bin/bash")
	for _, tc := range []struct {
		driver  string
		nodes   []int
		used    bool
		verdict string
	}{
		{snapshot.DriverNotLoaded, nil, false, VerdictClean},
		{snapshot.DriverLoaded, nil, false, VerdictUnknown},
		{"", nil, false, VerdictUnknown},
		{snapshot.DriverLoaded, []int{0}, false, VerdictClean},
		{"", nil, true, VerdictNotClean},
	} {
		to := snap("now", bash)
		if tc.used {
			to = snap("now", bash, proc(20, 6, "x", "/usr/bin/x", holder(3, "/dev/nvidia0", "r", "195:0")))
		}
		to.NVML = snapshot.NVML{Source: "library", Unavailable: "disabled by --no-nvml"}
		to.Host.NVIDIADriver, to.Host.GPUNodes = tc.driver, tc.nodes
		r := check(t, to, "", "")
		if r.Check.Verdict != tc.verdict {
			t.Errorf("driver %q, nodes %v, used %v: verdict %q (unchecked %q), want %q", tc.driver, tc.nodes, tc.used, r.Check.Verdict, r.Check.Unchecked, tc.verdict)
		}
		notes := strings.Join(r.Notes, "\n")
		if noGPU := strings.Contains(notes, "no GPU on this host"); noGPU != (tc.driver == snapshot.DriverNotLoaded) {
			t.Errorf("driver %q: notes %q", tc.driver, notes)
		}
	}
}

// A tenant in its own mount namespace can bind /dev/nvidia1 over its
// /dev/nvidia0 and open it beside the real /dev/nvidia0, two devices behind
// one path, told apart only by their numbers. Each is its own GPU's use, so
// neither a check of GPU 1 nor a diff of a process that held GPU 0 at FROM
// takes the GPU 1 descriptor for GPU 0's.
func TestOnePathTwoGPUs(t *testing.T) {
	own := holder(3, "/dev/nvidia0", "rw", "195:0")
	bound := holder(4, "/dev/nvidia0", "rw", "195:1")
	tenant := proc(4242, 900, "trainer", "/opt/trainer", own, bound)
	to := withGPUs(snap("now", tenant), gpuN(0, "GPU-0", 1<<20), gpuN(1, "GPU-1", 1<<20))
	expect(t, check(t, to, "1", ""), "gpu_in_use high 4242 /dev/nvidia0")
	if f := first(t, check(t, to, "1", "")); f.GPUUUID != "GPU-1" {
		t.Errorf("the GPU 1 descriptor is named as %q's", f.GPUUUID)
	}
	from := withGPUs(snap("base", proc(4242, 900, "trainer", "/opt/trainer", own)), gpuN(0, "GPU-0", 1<<20), gpuN(1, "GPU-1", 1<<20))
	expect(t, compare(from, to), "leftover_device_holder high 4242 /dev/nvidia0")
}

package diff

import (
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/snapshot"
)

const (
	dev0    = "/dev/nvidia0"
	ctl     = "/dev/nvidiactl"
	dev0No  = "195:0"
	ctlNo   = "195:255"
	pageLen = 4096
)

// persistenced holds nvidiactl at both ends. Alive and unchanged, it raises nothing.
func TestUnchangedHolderRaisesNothing(t *testing.T) {
	pd := proc(900, 50, "nvidia-persiste", "/usr/bin/nvidia-persistenced",
		holder(3, ctl, "rw", ctlNo), holder(4, dev0, "rw", dev0No),
		mapping(ctl, "rw-s", 0x7f0000000000, pageLen, 0, ctlNo))
	from := snap("a", pd, proc(1000, 60, "bash", "/usr/bin/bash"))
	to := snap("b", pd, proc(1000, 60, "bash", "/usr/bin/bash"))
	expect(t, compare(from, to))
}

func TestNewProcessMappingAndHolder(t *testing.T) {
	ghost := proc(4242, 700, "python3", "/usr/bin/python3.11",
		mapping(dev0, "rw-s", 0x7f0000000000, pageLen, 0, dev0No),
		mapping(dev0, "rw-s", 0x7f0000100000, pageLen, 0x1000, dev0No),
		mapping(dev0, "rw-s", 0x7f0000200000, pageLen, 0x2000, dev0No),
		mapping(ctl, "r--s", 0x7f0000300000, pageLen, 0, ctlNo),
		holder(3, dev0, "rw", dev0No), holder(5, dev0, "rw", dev0No),
		holder(4, ctl, "r", ctlNo),
		cgroups("0::/system.slice/docker-"+strings.Repeat("ab", 32)+".scope"),
		func(p *snapshot.Process) { p.ContainerID = strings.Repeat("ab", 32) })
	to := withGPUs(snap("b", ghost), gpu(0))
	r := compare(withGPUs(snap("a"), gpu(0)), to)
	expect(t, r,
		"leftover_device_holder high 4242 /dev/nvidia0",
		"leftover_device_mapping high 4242 /dev/nvidia0",
		"leftover_device_holder medium 4242 /dev/nvidiactl",
		"leftover_device_mapping medium 4242 /dev/nvidiactl",
		"unexpected_gpu_process medium 4242",
	)
	f := r.Findings[1]
	if len(f.Evidence) != 3 || !strings.Contains(f.Evidence[0], "rw-s 00000000 00:05 1000 /dev/nvidia0") {
		t.Errorf("mapping evidence = %q, want the 3 maps lines", f.Evidence)
	}
	if f.GPUUUID != "GPU-0" {
		t.Errorf("gpu = %q, want GPU-0 (minor 0)", f.GPUUUID)
	}
	if f.Process.ContainerID != strings.Repeat("ab", 32) || f.Process.Cgroup != "/system.slice/docker-"+strings.Repeat("ab", 32)+".scope" {
		t.Errorf("attribution = %+v", f.Process)
	}
	if !strings.Contains(f.Summary, "container abababababab") || !strings.Contains(f.Summary, "new since FROM") {
		t.Errorf("summary = %q", f.Summary)
	}
}

// A process alive at both ends that gains a device mapping raises it.
func TestSurvivorGainsMapping(t *testing.T) {
	before := proc(300, 10, "sshd", "/usr/sbin/sshd")
	after := proc(300, 10, "sshd", "/usr/sbin/sshd", mapping(dev0, "rw-s", 0x7f0000000000, pageLen, 0, ""))
	r := compare(snap("a", before), snap("b", after))
	expect(t, r, "leftover_device_mapping high 300 /dev/nvidia0", "unexpected_gpu_process medium 300")
	if !strings.Contains(r.Findings[0].Summary, "alive at FROM without it") {
		t.Errorf("summary = %q", r.Findings[0].Summary)
	}
}

// A process that mapped the device at FROM and maps more of it at TO is the same use.
func TestSameDeviceMoreLinesRaisesNothing(t *testing.T) {
	before := proc(300, 10, "dcgm", "/usr/bin/nv-hostengine", mapping(ctl, "rw-s", 0x7f0000000000, pageLen, 0, ctlNo))
	after := proc(300, 10, "dcgm", "/usr/bin/nv-hostengine",
		mapping(ctl, "rw-s", 0x7f0000000000, pageLen, 0, ctlNo), mapping(ctl, "rw-s", 0x7f0000100000, pageLen, 0, ctlNo))
	expect(t, compare(snap("a", before), snap("b", after)))
}

// A reused PID is a new process, so its mapping is a leftover though the PID mapped the device at FROM.
func TestPIDReuseIsANewProcess(t *testing.T) {
	old := proc(500, 100, "python3", "/usr/bin/python3", mapping(dev0, "rw-s", 0x7f0000000000, pageLen, 0, dev0No))
	reused := proc(500, 900, "python3", "/usr/bin/python3", mapping(dev0, "rw-s", 0x7f0000000000, pageLen, 0, dev0No))
	expect(t, compare(snap("a", old), snap("b", reused)),
		"leftover_device_mapping high 500 /dev/nvidia0", "unexpected_gpu_process medium 500")

	// And a reused PID with no device raises nothing, though the old process used the GPU.
	quiet := proc(500, 900, "sleep", "/usr/bin/sleep")
	expect(t, compare(snap("a", old), snap("b", quiet)))
}

func TestOtherDeviceMapping(t *testing.T) {
	x := proc(600, 5, "Xorg", "/usr/lib/xorg/Xorg", mapping("/dev/dri/card0", "rw-s", 0x7f0000000000, pageLen, 0, "226:0"))
	expect(t, compare(snap("a"), snap("b", x)), "other_device_mapping low 600 /dev/dri/card0")
	expect(t, compare(snap("a", x), snap("b", x)))
}

func TestRenamedDeviceNode(t *testing.T) {
	p := proc(700, 5, "worker", "/opt/app/worker",
		mapping("/var/lib/app/gpu-node", "rw-s", 0x7f0000000000, pageLen, 0, "195:0"),
		holder(3, "/var/lib/app/gpu-node", "rw", "195:0"))
	r := compare(snap("a"), snap("b", p))
	expect(t, r,
		"leftover_device_holder high 700 /var/lib/app/gpu-node",
		"leftover_device_mapping high 700 /var/lib/app/gpu-node",
		"renamed_device_node high 700 /var/lib/app/gpu-node",
		"unexpected_gpu_process medium 700")
	if ev := r.Findings[2].Evidence; len(ev) != 2 {
		t.Errorf("renamed evidence = %q, want the mapping and the holder", ev)
	}
	// A node named nvidia* is not renamed, whatever directory it sits in.
	q := proc(701, 5, "worker", "/opt/app/worker", mapping("/srv/x/dev/nvidia0", "r--s", 0x7f0000000000, pageLen, 0, "195:0"))
	expect(t, compare(snap("a"), snap("b", q)), "leftover_device_mapping medium 701 /srv/x/dev/nvidia0", "unexpected_gpu_process medium 701")
}

// A GPU held through a path the kernel could not render (capture keeps it by
// its number, with no path) is a holder, and its hidden name is renamed.
func TestUnnamedHolderIsRenamed(t *testing.T) {
	p := proc(702, 5, "worker", "/opt/app/worker", holder(4, "", "rw", "195:0"))
	r := compare(snap("a"), snap("b", p))
	if len(r.Findings) == 0 {
		t.Fatal("a GPU held through an unrendered path raised nothing")
	}
	kinds := map[string]bool{}
	for _, f := range r.Findings {
		kinds[f.Kind+" "+f.Severity.String()] = true
	}
	for _, want := range []string{"leftover_device_holder high", "renamed_device_node high"} {
		if !kinds[want] {
			t.Errorf("findings %v lack %s", got(r), want)
		}
	}
}

func TestRenamedNeedsADeviceNumber(t *testing.T) {
	for _, tc := range []struct {
		class, devno, path string
		want               bool
	}{
		{"nvidia", "195:0", "/dev/gpu0", true},
		{"nvidia", "511:0", "/dev/uvm", true}, // a uvm major capture read from /proc/devices
		{"nvidia", "", "/dev/nvidia0", false}, // no number, so classed by path, and named nvidia*
		{"other", "195:0", "/tmp/x", false},   // the class capture recorded is the truth, which diff never decides again
		{"nvidia", "195:255", "/dev/nvidiactl", false},
		{"other", "7:3", "/dev/loop3", false},
	} {
		if got := renamed(tc.class, deviceNumber(tc.devno), tc.path); got != tc.want {
			t.Errorf("renamed(%q, %q, %q) = %v, want %v", tc.class, tc.devno, tc.path, got, tc.want)
		}
	}
}

// A node deleted and made again (a driver reload) is the same device to a
// process that mapped it before, so nothing is new. The evidence keeps the mark.
func TestDeletedNodeIsTheSameDevice(t *testing.T) {
	before := proc(812, 50, "nvidia-persiste", "/usr/bin/nvidia-persistenced",
		mapping(ctl, "rw-s", 0x7f0000000000, pageLen, 0, ctlNo), holder(3, ctl, "rw", ctlNo))
	after := before
	after.Mappings = []snapshot.Mapping{before.Mappings[0]}
	after.Mappings[0].Deleted = true
	after.Holders = []snapshot.Holder{before.Holders[0]}
	after.Holders[0].Deleted = true
	expect(t, compare(snap("a", before), snap("b", after)))

	r := compare(snap("a"), snap("b", after))
	expect(t, r, "leftover_device_holder high 812 /dev/nvidiactl", "leftover_device_mapping high 812 /dev/nvidiactl",
		"unexpected_gpu_process medium 812")
	if ev := r.Findings[0].Evidence[0]; ev != "fd 3 -> /dev/nvidiactl (deleted) access rw [device char 195:255]" {
		t.Errorf("holder evidence %q", ev)
	}
	if ev := r.Findings[1].Evidence[0]; !strings.HasSuffix(ev, "/dev/nvidiactl (deleted) [device char 195:255]") {
		t.Errorf("mapping evidence %q", ev)
	}
}

// Holding a device other than NVIDIA's raises nothing. Every daemon holds
// /dev/null, and only mappings of other devices are worth a look.
func TestOtherDeviceHoldersRaiseNothing(t *testing.T) {
	p := proc(800, 5, "sshd", "/usr/sbin/sshd", holder(0, "/dev/null", "r", "1:3"), holder(3, "/dev/dri/card0", "rw", "226:0"))
	expect(t, compare(snap("a"), snap("b", p)))
}

// A device finding on /dev/nvidiaN names GPU N, from NVML at TO, else at FROM.
func TestDeviceFindingNamesItsGPU(t *testing.T) {
	p := proc(4242, 700, "python3", "/usr/bin/python3.11", holder(3, dev0, "rw", dev0No))
	for name, to := range map[string]*snapshot.Snapshot{
		"NVML at TO": withGPUs(snap("b", p), gpu(0)),
		"NVML only at FROM": func() *snapshot.Snapshot {
			s := snap("b", p)
			s.NVML = snapshot.NVML{Source: "disabled", Unavailable: "--no-nvml"}
			return s
		}(),
	} {
		r := compare(withGPUs(snap("a"), gpu(0)), to)
		if f := first(t, r); f.Kind != KindLeftoverDeviceHolder || f.GPUUUID != "GPU-0" {
			t.Errorf("%s: %s on GPU %q, want GPU-0", name, f.Kind, f.GPUUUID)
		}
	}
}

package accel

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/snapshot"
)

// amdgpuFdinfo is an amdgpu DRM file's fdinfo as Linux 6.x writes it
// (Documentation/gpu/drm-usage-stats.rst and amdgpu_fdinfo.c), with the
// older drm-memory- keys beside drm-total-.
const amdgpuFdinfo = "pos:\t0\nflags:\t02100002\nmnt_id:\t26\nino:\t685\n" +
	"drm-driver:\tamdgpu\ndrm-client-id:\t12\ndrm-pdev:\t0000:03:00.0\npasid:\t32771\n" +
	"drm-memory-vram:\t8192 KiB\ndrm-memory-gtt:\t2048 KiB\ndrm-memory-cpu:\t0 KiB\n" +
	"drm-total-vram:\t8192 KiB\ndrm-resident-vram:\t8192 KiB\ndrm-total-gtt:\t2048 KiB\n" +
	"amd-memory-visible-vram:\t0 KiB\n" +
	"drm-engine-gfx:\t1234567 ns\ndrm-engine-compute:\t0 ns\n"

// i915Fdinfo is i915's (5.19 and later): busy nanoseconds per engine class,
// regions system0 and local0.
const i915Fdinfo = "pos:\t0\nflags:\t02100002\nmnt_id:\t24\nino:\t1012\n" +
	"drm-driver:\ti915\ndrm-pdev:\t0000:00:02.0\ndrm-client-id:\t7\n" +
	"drm-total-system0:\t4 MiB\ndrm-shared-system0:\t0\ndrm-resident-system0:\t4 MiB\n" +
	"drm-total-local0:\t64 MiB\ndrm-resident-local0:\t64 MiB\n" +
	"drm-engine-render:\t25662044495 ns\ndrm-engine-copy:\t0 ns\ndrm-engine-video:\t0 ns\n" +
	"drm-engine-capacity-video:\t2\ndrm-engine-video-enhance:\t0 ns\n"

// xeFdinfo is xe's: engine cycles and total cycles, regions system,
// gtt, vram0 and stolen.
const xeFdinfo = "pos:\t0\nflags:\t02100002\nmnt_id:\t25\nino:\t2044\n" +
	"drm-driver:\txe\ndrm-client-id:\t42\ndrm-pdev:\t0000:03:00.0\n" +
	"drm-total-system:\t0\ndrm-shared-system:\t0\ndrm-active-system:\t0\ndrm-resident-system:\t0\ndrm-purgeable-system:\t0\n" +
	"drm-total-gtt:\t4 KiB\ndrm-total-vram0:\t23992 KiB\ndrm-shared-vram0:\t16 MiB\ndrm-resident-vram0:\t23992 KiB\n" +
	"drm-cycles-rcs:\t28257900\ndrm-total-cycles-rcs:\t7655183225\ndrm-cycles-bcs:\t0\ndrm-total-cycles-bcs:\t7655183225\n" +
	"drm-engine-capacity-vcs:\t2\n"

func TestParseFdinfo(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		device     uint64
		busy       bool
		client     uint64
	}{
		{"amdgpu", amdgpuFdinfo, 8 << 20, true, 12},
		{"i915", i915Fdinfo, 64 << 20, true, 7},
		{"xe", xeFdinfo, 23992 << 10, true, 42},
		// A DRM client with no stats (vgem): named, with no work.
		{"vgem", "pos:\t0\nflags:\t02\nmnt_id:\t20\nino:\t5\ndrm-driver:\tvgem\ndrm-client-id:\t3\n", 0, false, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, ok := ParseFdinfo([]byte(tc.text))
			if !ok || c.Driver != tc.name || c.ClientID != tc.client {
				t.Fatalf("ParseFdinfo = %+v, %v", c, ok)
			}
			if got := c.DeviceMemory(); got != tc.device {
				t.Errorf("device memory %d, want %d (%+v)", got, tc.device, c.Memory)
			}
			if c.Busy() != tc.busy || c.Working() != (tc.busy || tc.device > 0) {
				t.Errorf("busy %v working %v (%+v)", c.Busy(), c.Working(), c.Engines)
			}
		})
	}
	// Nothing of DRM's: /dev/kfd, a tty.
	if c, ok := ParseFdinfo([]byte("pos:\t0\nflags:\t02\nmnt_id:\t20\nino:\t9\n")); ok {
		t.Errorf("a file with no drm keys parsed as a client: %+v", c)
	}
	c, _ := ParseFdinfo([]byte(amdgpuFdinfo))
	if c.PCISlot != "0000:03:00.0" || len(c.Engines) != 2 || c.Engines[1].Name != "gfx" || c.Engines[1].BusyNS != 1234567 {
		t.Errorf("amdgpu client: %+v", c)
	}
}

// sysTree writes a directory laid out like /sys: files as given, and
// symbolic links for names ending in "@" (the value is the target).
func sysTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, val := range files {
		link := strings.HasSuffix(name, "@")
		p := filepath.Join(root, strings.TrimSuffix(name, "@"))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		if link {
			err = os.Symlink(val, p)
		} else {
			err = os.WriteFile(p, []byte(val), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// pciDRM is the sysfs of one PCI device's DRM node, as the kernel lays it
// out: class/drm/NODE links into the device's drm directory, whose device
// link leads to the PCI function, which names its driver and subsystem.
func pciDRM(files map[string]string, slot, vendorID, driver, node, devno string) {
	dev := "devices/pci0000:00/0000:00:01.0/" + slot
	files["class/drm/"+node+"@"] = "../../" + dev + "/drm/" + node
	files[dev+"/drm/"+node+"/dev"] = devno + "\n"
	files[dev+"/drm/"+node+"/device@"] = "../../../" + slot
	files[dev+"/vendor"] = vendorID + "\n"
	files[dev+"/driver@"] = "../../../../bus/pci/drivers/" + driver
	files[dev+"/subsystem@"] = "../../../../bus/pci"
	files["bus/pci/drivers/"+driver+"/.keep"] = ""
}

// AMDHost is an MI300X-like host: amdgpu with its VRAM figures, KFD's
// topology (a CPU node and the GPU, location_id 0x300 = 03:00.0) and two
// KFD processes, an Intel xe card, a Gaudi accel node, and an NVIDIA card
// (nvidia-drm) that is left to NVML.
func amdHost() map[string]string {
	f := map[string]string{}
	pciDRM(f, "0000:03:00.0", "0x1002", "amdgpu", "card1", "226:1")
	pciDRM(f, "0000:03:00.0", "0x1002", "amdgpu", "renderD128", "226:128")
	f["devices/pci0000:00/0000:00:01.0/0000:03:00.0/mem_info_vram_total"] = "206141652992\n"
	f["devices/pci0000:00/0000:00:01.0/0000:03:00.0/mem_info_vram_used"] = "122406567936\n"
	pciDRM(f, "0000:0a:00.0", "0x8086", "xe", "renderD129", "226:129")
	pciDRM(f, "0000:18:00.0", "0x10de", "nvidia", "card0", "226:0")
	f["class/accel/accel0@"] = "../../devices/pci0000:00/0000:00:01.0/0000:4d:00.0/accel/accel0"
	f["devices/pci0000:00/0000:00:01.0/0000:4d:00.0/accel/accel0/dev"] = "261:0\n"
	f["devices/pci0000:00/0000:00:01.0/0000:4d:00.0/accel/accel0/device@"] = "../../../0000:4d:00.0"
	f["devices/pci0000:00/0000:00:01.0/0000:4d:00.0/vendor"] = "0x1da3\n"
	f["devices/pci0000:00/0000:00:01.0/0000:4d:00.0/subsystem@"] = "../../../../bus/pci"
	f["class/drm/card1-DP-1/dev"] = "junk"
	f["class/drm/version"] = "drm 1.1.0 20060810\n"
	f["class/kfd/kfd/dev"] = "235:0\n"
	f["class/kfd/kfd/topology/nodes/0/gpu_id"] = "0\n"
	f["class/kfd/kfd/topology/nodes/0/properties"] = "cpu_cores_count 96\nsimd_count 0\n"
	f["class/kfd/kfd/topology/nodes/1/gpu_id"] = "4711\n"
	f["class/kfd/kfd/topology/nodes/1/properties"] = "cpu_cores_count 0\nsimd_count 1216\nlocation_id 768\ndomain 0\n"
	f["class/kfd/kfd/proc/5150/pasid"] = "32771\n"
	f["class/kfd/kfd/proc/5150/vram_4711"] = "114000000000\n"
	f["class/kfd/kfd/proc/5150/sdma_4711"] = "0\n"
	f["class/kfd/kfd/proc/6160/vram_4711"] = "0\n"
	return f
}

func TestReadSysfs(t *testing.T) {
	a, err := Read(sysTree(t, amdHost()))
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Errors) != 0 {
		t.Errorf("errors: %q", a.Errors)
	}
	byName := map[string]snapshot.Accelerator{}
	for _, d := range a.Devices {
		byName[d.Name] = d
	}
	if len(a.Devices) != 3 {
		t.Fatalf("devices %+v: want amd, intel and habana, not NVIDIA's", a.Devices)
	}
	amd := byName["0000:03:00.0"]
	if amd.Vendor != "amd" || amd.Driver != "amdgpu" || amd.PCISlot != "0000:03:00.0" || len(amd.Nodes) != 2 ||
		amd.KFDGPUID != 4711 || amd.MemoryUsed == nil || *amd.MemoryUsed != 122406567936 || *amd.MemoryTotal != 206141652992 {
		t.Errorf("amd: %+v", amd)
	}
	if amd.Nodes[1].Kind != snapshot.NodeRender || amd.Nodes[1].Path != "/dev/dri/renderD128" || amd.Nodes[1].DeviceNumber.String() != "226:128" {
		t.Errorf("amd nodes: %+v", amd.Nodes)
	}
	if strings.Join(amd.IDs, ",") != "amd:0,0000:03:00.0,card1" || strings.Join(byName["0000:0a:00.0"].IDs, ",") != "intel:0,0000:0a:00.0" {
		t.Errorf("ids: amd %q, intel %q", amd.IDs, byName["0000:0a:00.0"].IDs)
	}
	if strings.Join(amd.PerProcess, ",") != "drm fdinfo,kfd" {
		t.Errorf("amd per process: %q", amd.PerProcess)
	}
	if xe := byName["0000:0a:00.0"]; xe.Vendor != "intel" || xe.MemoryUsed != nil || !strings.Contains(xe.Missing, "not in sysfs") {
		t.Errorf("intel: %+v", xe)
	}
	if g := byName["0000:4d:00.0"]; g.Vendor != "habana" || g.Nodes[0].Kind != snapshot.NodeAccel || !strings.Contains(g.Missing, "holders and mappings only") {
		t.Errorf("habana: %+v", g)
	}
	if a.KFDNode.String() != "235:0" || len(a.KFDProcesses) != 2 || a.KFDProcesses[0].PID != 5150 ||
		a.KFDProcesses[0].VRAM[0] != (snapshot.KFDMemory{GPUID: 4711, Bytes: 114000000000}) {
		t.Errorf("kfd: %v %+v", a.KFDNode, a.KFDProcesses)
	}
}

// A vendor's devices are numbered in PCI slot order, each vendor from 0,
// whatever order sysfs lists their nodes in: ROCm's and Level Zero's
// indexes.
func TestDeviceIDs(t *testing.T) {
	f := map[string]string{}
	pciDRM(f, "0000:c3:00.0", "0x1002", "amdgpu", "card0", "226:0")
	pciDRM(f, "0000:03:00.0", "0x1002", "amdgpu", "card9", "226:9")
	pciDRM(f, "0000:03:00.0", "0x1002", "amdgpu", "renderD129", "226:129")
	pciDRM(f, "0000:83:00.0", "0x1002", "amdgpu", "card2", "226:2")
	pciDRM(f, "0000:0a:00.0", "0x1af4", "virtio-pci", "card3", "226:3")
	a, err := Read(sysTree(t, f))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range a.Devices {
		got = append(got, d.Name+"="+strings.Join(d.IDs, ","))
	}
	want := "0000:c3:00.0=amd:2,0000:c3:00.0,card0 0000:83:00.0=amd:1,0000:83:00.0,card2 0000:0a:00.0=0000:0a:00.0,card3 0000:03:00.0=amd:0,0000:03:00.0,card9"
	if strings.Join(got, " ") != want {
		t.Errorf("ids:\n %s\nwant\n %s", strings.Join(got, " "), want)
	}
}

// A host with no accelerator but NVIDIA's reads as none: its snapshot is
// as before.
func TestReadNVIDIAOnly(t *testing.T) {
	f := map[string]string{}
	pciDRM(f, "0000:18:00.0", "0x10de", "nvidia", "card0", "226:0")
	pciDRM(f, "0000:18:00.0", "0x10de", "nvidia", "renderD128", "226:128")
	for _, root := range []string{sysTree(t, f), t.TempDir()} {
		if a, err := Read(root); a != nil || err != nil {
			t.Errorf("Read(%s) = %+v, %v; want nothing", root, a, err)
		}
	}
	if _, err := Read(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Error("a sys root that is not there read")
	}
}

// A link that leaves the tree is not followed: its node is an error, and
// nothing outside is read.
func TestReadRefusesLinksOutOfTree(t *testing.T) {
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "dev"), []byte("226:128\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f := amdHost()
	f["class/drm/renderD130@"] = outside
	f["class/drm/renderD131@"] = "../../../../../../../../" + outside
	f["class/kfd/kfd/proc/7000/vram_4711@"] = filepath.Join(outside, "dev")
	a, err := Read(sysTree(t, f))
	if err != nil {
		t.Fatal(err)
	}
	errs := strings.Join(a.Errors, "\n")
	for _, want := range []string{"class/drm/renderD130", "class/drm/renderD131", "kfd: proc 7000"} {
		if !strings.Contains(errs, want) {
			t.Errorf("no error for %s: %q", want, a.Errors)
		}
	}
	if len(a.Devices) != 3 {
		t.Errorf("devices: %+v", a.Devices)
	}
}

package nri

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/gpusnap/gpusnap/kubelet/kubelettest"
)

// What a pod's owner writes decides which GPUs are checked: read within
// bounds, and what cannot be read is every GPU, never none.
func TestContainerGPUs(t *testing.T) {
	dev := func(path string, major, minor int64) *api.LinuxDevice {
		return &api.LinuxDevice{Path: path, Type: "c", Major: major, Minor: minor}
	}
	many := make([]*api.LinuxDevice, maxDevices+1)
	for i := range many {
		many[i] = dev("/dev/null", 1, 3)
	}
	for name, tc := range map[string]struct {
		c     *api.Container
		given bool
		gpus  string // "all" for every GPU
	}{
		"no GPU":           {&api.Container{Linux: &api.LinuxContainer{Devices: []*api.LinuxDevice{dev("/dev/null", 1, 3)}}}, false, ""},
		"device by number": {&api.Container{Linux: &api.LinuxContainer{Devices: []*api.LinuxDevice{dev("/dev/x", 195, 3), dev("/dev/nvidiactl", 195, 255)}}}, true, "3"},
		"device by name":   {&api.Container{Linux: &api.LinuxContainer{Devices: []*api.LinuxDevice{dev("/dev/nvidia5", 7, 1), dev("/dev/nvidia-uvm", 510, 0)}}}, true, "5"},
		"env list":         {&api.Container{Env: []string{"NVIDIA_VISIBLE_DEVICES=0,2"}}, true, "0,2"},
		"env all":          {&api.Container{Env: []string{"NVIDIA_VISIBLE_DEVICES=all"}}, true, "all"},
		"env none":         {&api.Container{Env: []string{"NVIDIA_VISIBLE_DEVICES=none"}}, false, ""},
		"env unreadable":   {&api.Container{Env: []string{"NVIDIA_VISIBLE_DEVICES=0,../../etc"}}, true, "all"},
		"env too long":     {&api.Container{Env: []string{"NVIDIA_VISIBLE_DEVICES=" + strings.Repeat("0,", maxEnvValue)}}, true, "all"},
		"too many devices": {&api.Container{Linux: &api.LinuxContainer{Devices: many}}, true, "all"},
		"too many env":     {&api.Container{Env: make([]string, maxEnv+1)}, true, "all"},
		// The runtime injects a CDI device's nodes after CreateContainer:
		// the request names the GPU, the Linux devices do not yet.
		"cdi by uuid":      {&api.Container{CDIDevices: []*api.CDIDevice{{Name: "nvidia.com/gpu=GPU-8f2c1d3e-0000-4000-8000-000000000001"}}}, true, "GPU-8f2c1d3e-0000-4000-8000-000000000001"},
		"cdi by index":     {&api.Container{CDIDevices: []*api.CDIDevice{{Name: "nvidia.com/gpu=1"}}}, true, "all"},
		"cdi mig index":    {&api.Container{CDIDevices: []*api.CDIDevice{{Name: "nvidia.com/mig=0:1"}}}, true, "all"},
		"cdi other vendor": {&api.Container{CDIDevices: []*api.CDIDevice{{Name: "vendor.example/fpga=0"}}}, false, ""},
		"cdi annotation":   {&api.Container{Annotations: map[string]string{"cdi.k8s.io/gpu": "nvidia.com/gpu=all"}}, true, "all"},
		"cdi bad uuid":     {&api.Container{CDIDevices: []*api.CDIDevice{{Name: "nvidia.com/gpu=GPU-../../etc"}}}, true, "all"},
		"cdi too many":     {&api.Container{CDIDevices: make([]*api.CDIDevice, maxDevices+1)}, true, "all"},
		"cdi annotation uuid and node": {&api.Container{Annotations: map[string]string{"cdi.k8s.io/x": "nvidia.com/gpu=GPU-8f2c1d3e-0000-4000-8000-000000000001"},
			Linux: &api.LinuxContainer{Devices: []*api.LinuxDevice{dev("/dev/nvidia2", 195, 2)}}}, true, "2,GPU-8f2c1d3e-0000-4000-8000-000000000001"},
	} {
		wantGPUs(t, name, tc.c, []string{t.TempDir()}, tc.given, tc.gpus)
	}
}

// A pod's UID names its evidence files: only a UID is one.
func TestPodUIDChecked(t *testing.T) {
	for uid, ok := range map[string]bool{
		"1a2b3c4d-5e6f-7a8b-9c0d-112233445566": true,
		"":                                     false,
		"../../etc/cron.d/x":                   false,
		"1A2B":                                 false,
		strings.Repeat("a", 65):                false,
	} {
		p, err := podOf(&api.PodSandbox{Uid: uid, Name: strings.Repeat("\x1b[31m", 100), Namespace: "ml"})
		if (err == nil) != ok {
			t.Errorf("UID %q: %v", uid, err)
		}
		if len(p.Name) > 4*maxName+3 || strings.Contains(p.Name, "\x1b") {
			t.Errorf("name not bounded and escaped: %d bytes", len(p.Name))
		}
	}
}

// A DRA container names its claim's CDI devices, whose nodes the runtime
// injects after CreateContainer: the claim's spec says which GPUs they are,
// and a name no spec lists is every GPU, never none.
func TestContainerDRAClaims(t *testing.T) {
	specs := t.TempDir()
	claim := kubelettest.NVIDIAClaimSpec(t, specs, "5d1c7a3e-0b2f-4c6d-8e9f-a1b2c3d4e5f6", "gpu-1", 1)
	mig := kubelettest.NVIDIAClaimSpec(t, specs, "6e2d8b4f-1c3a-4d7e-9f0a-b2c3d4e5f607", "gpu-3-mig-9-4-4", 3)
	if err := os.WriteFile(filepath.Join(specs, "imex.yaml"), []byte("kind: k8s.compute-domain.nvidia.com/channel\ndevices:\n- name: ch0\n  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia-caps-imex-channels/channel0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cdiDevices := func(names ...string) *api.Container {
		c := &api.Container{}
		for _, n := range names {
			c.CDIDevices = append(c.CDIDevices, &api.CDIDevice{Name: n})
		}
		return c
	}
	for name, tc := range map[string]struct {
		c     *api.Container
		given bool
		gpus  string
	}{
		"claim":                 {cdiDevices(claim), true, "1"},
		"claim by annotation":   {&api.Container{Annotations: map[string]string{"cdi.k8s.io/dra": claim}}, true, "1"},
		"MIG claim":             {cdiDevices(mig, "k8s.gpu.nvidia.com/device=gpu-3-mig-9-4-4"), true, "all"},
		"MIG claim alone":       {cdiDevices(mig), true, "3"},
		"claim without spec":    {cdiDevices("k8s.gpu.nvidia.com/claim=0f6c1a52-8a3e-4c1b-9d7e-2b5f4a6c8d10-gpu-2"), true, "all"},
		"device without spec":   {cdiDevices("k8s.gpu.nvidia.com/device=gpu-2"), true, "all"},
		"channel, no GPU":       {cdiDevices("k8s.compute-domain.nvidia.com/channel=ch0"), false, ""},
		"other vendor unlisted": {cdiDevices("vendor.example/fpga=0"), false, ""},
	} {
		wantGPUs(t, name, tc.c, []string{specs}, tc.given, tc.gpus)
	}
}

// wantGPUs checks the GPUs a container is given ("all" for every GPU).
func wantGPUs(t *testing.T, name string, c *api.Container, specDirs []string, given bool, gpus string) {
	t.Helper()
	set, ok := containerGPUs(c, specDirs)
	got := gpuText(set)
	if !ok {
		got = ""
	}
	if ok != given || got != gpus {
		t.Errorf("%s: given %v, GPUs %q; want %v, %q", name, ok, got, given, gpus)
	}
}

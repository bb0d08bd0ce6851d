package nri

import (
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
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
		set, given := containerGPUs(tc.c)
		got := gpuText(set)
		if !given {
			got = ""
		}
		if given != tc.given || got != tc.gpus {
			t.Errorf("%s: given %v, GPUs %q; want %v, %q", name, given, got, tc.given, tc.gpus)
		}
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

package cdi

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/kubelet/kubelettest"
)

// The specs NVIDIA's DRA driver writes (a transient YAML spec per claim, a
// JSON base spec of every device), another vendor's, and what is not read:
// a link out of the directory, a broken spec, a directory that is not there.
func TestSpecs(t *testing.T) {
	static, run, outside := t.TempDir(), t.TempDir(), t.TempDir()
	claim := kubelettest.NVIDIAClaimSpec(t, run, "5d1c7a3e-0b2f-4c6d-8e9f-a1b2c3d4e5f6", "gpu-1", 1)
	mig := kubelettest.NVIDIAClaimSpec(t, run, "6e2d8b4f-1c3a-4d7e-9f0a-b2c3d4e5f607", "gpu-3-mig-9-4-4", 3)
	write := func(dir, name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(run, "k8s.gpu.nvidia.com-device_base.json", `{"cdiVersion":"0.5.0","kind":"k8s.gpu.nvidia.com/device",
		"devices":[{"name":"gpu-0","containerEdits":{"deviceNodes":[{"path":"/dev/nvidia0"}]}},
		           {"name":"gpu-4","containerEdits":{"deviceNodes":[{"path":"/dev/gpu-four","type":"c","major":195,"minor":4}]}},
		           {"name":"gpu-vfio-0","containerEdits":{"deviceNodes":[{"path":"/dev/vfio/12"}]}}],
		"containerEdits":{"deviceNodes":[{"path":"/dev/nvidiactl"},{"path":"/dev/nvidia-uvm"}]}}`)
	write(static, "vendor.example-fpga.yaml", "cdiVersion: 0.6.0\nkind: vendor.example/fpga\ndevices:\n- name: \"0\"\n  containerEdits:\n    deviceNodes:\n    - path: /dev/fpga0\n")
	write(static, "broken.yaml", "kind: [unclosed\n")
	write(static, "notes.txt", "kind: x/y\n")
	// A spec outside the directories, linked into one: not read.
	write(outside, "evil.yaml", "kind: nvidia.com/gpu\ndevices:\n- name: linked\n  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia7\n")
	if err := os.Symlink(filepath.Join(outside, "evil.yaml"), filepath.Join(static, "linked.yaml")); err != nil {
		t.Fatal(err)
	}
	specs, err := Read([]string{static, run, filepath.Join(run, "absent")})
	if err == nil || !strings.Contains(err.Error(), "broken.yaml") || strings.Count(err.Error(), "\n") != 0 {
		t.Errorf("error %v: want the broken spec alone named", err)
	}
	for name, want := range map[string]struct {
		gpus   []int
		listed bool
	}{
		claim:                                  {[]int{1}, true},
		mig:                                    {[]int{3}, true}, // the MIG device's parent: its caps are no GPU
		"k8s.gpu.nvidia.com/device=gpu-0":      {[]int{0}, true},
		"k8s.gpu.nvidia.com/device=gpu-4":      {[]int{4}, true}, // by number: a node named otherwise
		"k8s.gpu.nvidia.com/device=gpu-vfio-0": {nil, true},
		"vendor.example/fpga=0":                {nil, true},
		"nvidia.com/gpu=linked":                {nil, false},
		"k8s.gpu.nvidia.com/claim=other-gpu-0": {nil, false},
	} {
		gpus, listed := specs.GPUs(name)
		if !reflect.DeepEqual(gpus, want.gpus) || listed != want.listed {
			t.Errorf("%s: GPUs %v, listed %v; want %v, %v", name, gpus, listed, want.gpus, want.listed)
		}
	}
}

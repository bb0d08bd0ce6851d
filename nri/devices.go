package nri

import (
	"strconv"
	"strings"

	"github.com/containerd/nri/pkg/api"

	"github.com/gpusnap/gpusnap/snapshot"
)

// Bounds on what a container's request may make the plugin read: the pod's
// owner writes its environment, and a device list past these is refused
// rather than half read.
const (
	maxDevices  = 1024
	maxEnv      = 4096
	maxEnvValue = 4096
	nvidiaMajor = 195
	visibleEnv  = "NVIDIA_VISIBLE_DEVICES="
)

// containerGPUs is the GPUs a container is given, and whether it is given
// any, from its NVIDIA GPU devices (major 195 below 255, or named nvidiaN)
// and NVIDIA_VISIBLE_DEVICES. "all" is every GPU (nil), and "none", "void"
// and "" are none. A list that cannot be read or is too long is every GPU,
// checked whole and never taken for none.
func containerGPUs(c *api.Container) (*snapshot.GPUSet, bool) {
	var ids []string
	all := false
	devs := c.GetLinux().GetDevices()
	if len(devs) > maxDevices {
		return nil, true
	}
	for _, d := range devs {
		if n, ok := gpuMinor(d); ok {
			ids = append(ids, strconv.Itoa(n))
		}
	}
	env := c.GetEnv()
	if len(env) > maxEnv {
		return nil, true
	}
	for _, e := range env {
		v, ok := strings.CutPrefix(e, visibleEnv)
		if !ok {
			continue
		}
		switch v = strings.TrimSpace(v); {
		case len(v) > maxEnvValue:
			all = true
		case v == "all":
			all = true
		case v == "" || v == "none" || v == "void":
		default:
			ids = append(ids, v)
		}
	}
	if all {
		return nil, true
	}
	if len(ids) == 0 {
		return nil, false
	}
	set, err := snapshot.ParseGPUList(strings.Join(ids, ","))
	if err != nil {
		return nil, true
	}
	return &set, true
}

// gpuMinor is the GPU a device names: the minor of a 195 device below 255
// (nvidiactl is 255, nvidia-modeset 254), or N of a node named nvidiaN.
func gpuMinor(d *api.LinuxDevice) (int, bool) {
	if d.GetMajor() == nvidiaMajor && d.GetMinor() >= 0 && d.GetMinor() < 254 {
		return int(d.GetMinor()), true
	}
	base := d.GetPath()[strings.LastIndexByte(d.GetPath(), '/')+1:]
	if n, ok := strings.CutPrefix(base, "nvidia"); ok {
		if v, err := strconv.Atoi(n); err == nil && v >= 0 && v < 254 && strconv.Itoa(v) == n {
			return v, true
		}
	}
	return 0, false
}

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
	// cdiVendor is the vendor of NVIDIA's CDI devices (nvidia.com/gpu=0 of
	// nvidia-ctk's spec, k8s.device-plugin.nvidia.com/gpu=GPU-... of the device
	// plugin's), and cdiAnnotation the prefix of the annotations that request
	// CDI devices by name.
	cdiVendor     = "nvidia.com"
	cdiAnnotation = "cdi.k8s.io/"
)

// containerGPUs is the GPUs a container is given, and whether it is given
// any: its NVIDIA GPU nodes (major 195 below 255, or named nvidiaN),
// NVIDIA_VISIBLE_DEVICES ("all" is every GPU, nil; "none", "void" and ""
// none) and NVIDIA's CDI devices. What cannot be read, or is too long, is
// every GPU, never none.
func containerGPUs(c *api.Container) (*snapshot.GPUSet, bool) {
	ids, all := cdiGPUs(c)
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

// cdiGPUs reads the NVIDIA CDI GPUs a container requests (kind gpu or mig
// of nvidia.com or a subdomain), which name GPUs whose nodes the runtime
// injects later. A UUID is that GPU; an NVML index, a MIG index, all, or a
// request past the bounds is every GPU (an index is not a minor number).
func cdiGPUs(c *api.Container) (ids []string, all bool) {
	var names []string
	for _, d := range c.GetCDIDevices() {
		names = append(names, d.GetName())
	}
	for k, v := range c.GetAnnotations() {
		if !strings.HasPrefix(k, cdiAnnotation) {
			continue
		}
		if len(v) > maxEnvValue {
			return nil, true
		}
		names = append(names, strings.Split(v, ",")...)
	}
	if len(names) > maxDevices {
		return nil, true
	}
	for _, name := range names {
		kind, dev, _ := strings.Cut(strings.TrimSpace(name), "=")
		vendor, class, _ := strings.Cut(kind, "/")
		if (vendor != cdiVendor && !strings.HasSuffix(vendor, "."+cdiVendor)) || (class != "gpu" && !strings.HasPrefix(class, "mig")) {
			continue
		}
		if strings.HasPrefix(dev, "GPU-") || strings.HasPrefix(dev, "MIG-") {
			ids = append(ids, dev)
		} else {
			all = true
		}
	}
	return ids, all
}

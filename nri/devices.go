package nri

import (
	"strconv"
	"strings"

	"github.com/containerd/nri/pkg/api"

	"github.com/gpusnap/gpusnap/kubelet/cdi"
	"github.com/gpusnap/gpusnap/snapshot"
)

// Bounds on what a container's request may make the plugin read. The pod's
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
	// plugin's, k8s.gpu.nvidia.com/claim=... of its DRA driver), and
	// cdiAnnotation the prefix of the annotations that request CDI devices by name.
	cdiVendor     = "nvidia.com"
	cdiAnnotation = "cdi.k8s.io/"
)

// containerGPUs is the GPUs a container is given, and whether it is given
// any. They come from its NVIDIA GPU nodes (major 195 below 255, or named
// nvidiaN), from NVIDIA_VISIBLE_DEVICES ("all" is every GPU, given as nil,
// and "none", "void" and "" are none) and from its CDI devices, resolved
// through the CDI specs of specDirs. What cannot be read, or is too long, is
// every GPU, never none.
func containerGPUs(c *api.Container, specDirs []string) (*snapshot.GPUSet, bool) {
	ids, all := cdiGPUs(c, specDirs)
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

// gpuMinor is the GPU a device names, the minor of a 195 device below 255
// (nvidiactl is 255, nvidia-modeset 254) or N of a node named nvidiaN.
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

// cdiGPUs reads the GPUs of a container's CDI devices, whose nodes the
// runtime injects after CreateContainer. A device a spec of specDirs lists
// gives its nodes' GPUs (a DRA claim's too). Of an unlisted device of
// NVIDIA's vendors, a GPU UUID is that GPU and anything else (an index, all,
// a claim) is every GPU. An unlisted device of another vendor is none. Past
// the bounds, the answer is every GPU.
func cdiGPUs(c *api.Container, specDirs []string) (ids []string, all bool) {
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
	var specs *cdi.Specs
	for _, name := range names {
		name = strings.TrimSpace(name)
		if specs == nil {
			// A spec that cannot be read lists nothing, so its devices fall
			// to the rules below.
			specs, _ = cdi.Read(specDirs)
		}
		if gpus, listed := specs.GPUs(name); listed {
			for _, n := range gpus {
				ids = append(ids, strconv.Itoa(n))
			}
			continue
		}
		kind, dev, _ := strings.Cut(name, "=")
		vendor, class, _ := strings.Cut(kind, "/")
		switch {
		case vendor != cdiVendor && !strings.HasSuffix(vendor, "."+cdiVendor):
		case (class == "gpu" || strings.HasPrefix(class, "mig")) && (strings.HasPrefix(dev, "GPU-") || strings.HasPrefix(dev, "MIG-")):
			ids = append(ids, dev)
		default:
			all = true
		}
	}
	return ids, all
}

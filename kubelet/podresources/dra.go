package podresources

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpusnap/gpusnap/kubelet"
	"github.com/gpusnap/gpusnap/kubelet/cdi"
)

// The DRA drivers whose devices gpusnap knows are NVIDIA's GPU driver (full
// GPUs gpu-<minor>, MIG devices gpu-<minor>-mig-..., by its current
// releases' names) and its ComputeDomain driver, whose IMEX channels and
// daemons are no GPU.
const nvidiaGPUDriver = "gpu.nvidia.com"

var nonGPUDrivers = map[string]bool{"compute-domain.nvidia.com": true}

// claimResolver resolves DRA devices to GPUs, reading the CDI spec
// directories once, at the first device that names CDI devices.
type claimResolver struct {
	specs *cdi.Specs
	err   error
}

// add adds one device of a claim to p, a GPU device or one not understood.
// A device of a known non-GPU driver, or of another driver whose CDI spec
// lists no GPU node, is no GPU and not added.
func (r *claimResolver) add(p *kubelet.Pod, dirs []string, dr *podresourcesv1.DynamicResource, cr *podresourcesv1.ClaimResource) {
	d := kubelet.ClaimDevice{Claim: dr.GetClaimNamespace() + "/" + dr.GetClaimName(), Driver: cr.GetDriverName(),
		Pool: cr.GetPoolName(), Device: cr.GetDeviceName(), ShareID: cr.GetShareId()}
	for _, c := range cr.GetCdiDevices() {
		d.CDIDevices = append(d.CDIDevices, c.GetName())
	}
	if nonGPUDrivers[d.Driver] {
		return
	}
	d.Minors, d.NotUnderstood = r.resolve(dirs, &d)
	if d.Driver != nvidiaGPUDriver && d.NotUnderstood == "" && len(d.Minors) == 0 {
		return
	}
	if d.ShareID != "" {
		p.Shared = true
	}
	p.Claims = append(p.Claims, d)
}

// resolve is the GPUs a DRA device gives, from node-local sources. These are
// the device nodes of its CDI devices' specs, else (NVIDIA's driver) the
// minor its name carries. What neither tells is not understood, and says why.
func (r *claimResolver) resolve(dirs []string, d *kubelet.ClaimDevice) ([]int, string) {
	var minors []int
	listed := false
	for _, name := range d.CDIDevices {
		if r.specs == nil {
			r.specs, r.err = cdi.Read(dirs)
		}
		gpus, ok := r.specs.GPUs(name)
		listed = listed || ok
		minors = append(minors, gpus...)
	}
	if len(minors) > 0 {
		slices.Sort(minors)
		return slices.Compact(minors), ""
	}
	where := strings.Join(dirs, ", ")
	if dirs == nil {
		where = strings.Join(cdi.DefaultSpecDirs, ", ")
	}
	switch {
	case d.Driver == nvidiaGPUDriver:
		if n, ok := deviceNameMinor(d.Device); ok {
			return []int{n}, ""
		}
		return nil, fmt.Sprintf("no CDI spec under %s lists a GPU node of its CDI devices %q, and its name is not gpu-<minor>", where, d.CDIDevices)
	case listed:
		return nil, "" // another driver's device that has no GPU node is no GPU
	}
	return nil, fmt.Sprintf("driver %s is not one gpusnap knows, and no CDI spec under %s lists its CDI devices %q", d.Driver, where, d.CDIDevices)
}

// deviceNameMinor is the minor a device name of NVIDIA's DRA driver
// carries, the N of gpu-N or of a MIG device's gpu-N-mig-... (its parent).
func deviceNameMinor(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "gpu-")
	if !ok {
		return 0, false
	}
	num, tail, _ := strings.Cut(rest, "-")
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 || strconv.Itoa(n) != num || (tail != "" && !strings.HasPrefix(tail, "mig-")) {
		return 0, false
	}
	return n, true
}

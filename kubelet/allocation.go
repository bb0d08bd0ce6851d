// Package kubelet holds which GPU the kubelet of this node gave each pod,
// joined to the pod's UID, which is what a process's cgroup names. It is
// plain data and the rules on it, and package podresources reads it from
// the kubelet.
package kubelet

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gpusnap/gpusnap/snapshot"
)

// Pod is a pod the kubelet lists and the GPUs it was given.
type Pod struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// UID is the pod's UID, as its processes' cgroups name it. It is "" when
	// no directory of the pod log directory names the pod once.
	UID string `json:"uid,omitempty"`
	// GPUs are the device ids of the pod's nvidia.com/gpu* (and MIG)
	// resources. They are GPU UUIDs under the device plugin's default uuid
	// strategy, GPU indexes under its index strategy and MIG UUIDs under
	// mixed MIG. A time-sliced replica's id is kept without its ::N suffix.
	GPUs []string `json:"gpus"`
	// Claims are the devices of the pod's DRA resource claims.
	Claims []ClaimDevice `json:"claims,omitempty"`
	// Shared says another pod may be given a GPU of this one, as with a
	// time-sliced replica, a renamed shared resource (nvidia.com/gpu.shared)
	// or a DRA device with a share id. A process is then outside its pod's
	// allocation only where the pod's whole set lacks its GPU, as for any pod.
	Shared bool `json:"shared,omitempty"`
}

// ClaimDevice is one device of a DRA resource claim, as the kubelet's
// pod-resources API lists it, and the GPUs it was resolved to.
type ClaimDevice struct {
	Claim      string   `json:"claim"` // namespace/name
	Driver     string   `json:"driver"`
	Pool       string   `json:"pool"`
	Device     string   `json:"device"`
	ShareID    string   `json:"share_id,omitempty"`
	CDIDevices []string `json:"cdi_devices,omitempty"`
	// Minors are the GPUs (the N of /dev/nvidiaN) the device gives the pod.
	Minors []int `json:"gpu_minors,omitempty"`
	// NotUnderstood says why the device could not be resolved to GPUs. It
	// is "" when it was (to Minors, or to no GPU).
	NotUnderstood string `json:"not_understood,omitempty"`
}

// ErrNotUnderstood is wrapped by the error for a pod whose allocation names
// a device that could not be resolved to GPUs. Such an allocation is not
// known, which is neither "no GPU" nor every GPU.
var ErrNotUnderstood = errors.New("allocation not understood")

// notUnderstood is why p's allocation is not known, or "" when it is.
func (p *Pod) notUnderstood() string {
	var why []string
	for _, c := range p.Claims {
		if c.NotUnderstood != "" {
			why = append(why, "claim "+c.Claim+" device "+c.Driver+"/"+c.Pool+"/"+c.Device+": "+c.NotUnderstood)
		}
	}
	if len(why) == 0 {
		return ""
	}
	return "pod " + p.Namespace + "/" + p.Name + ": " + strings.Join(why, "; ")
}

// has reports whether the pod was given g, by a device id or a claim.
func (p *Pod) has(g *snapshot.GPUUse) bool {
	if slices.ContainsFunc(p.GPUs, func(id string) bool { return given(id, g) }) {
		return true
	}
	return g.MinorNumber != nil && slices.ContainsFunc(p.Claims, func(c ClaimDevice) bool { return slices.Contains(c.Minors, *g.MinorNumber) })
}

// Allocations are a node's GPU pods, looked up by GPU and by pod UID.
type Allocations struct {
	Pods []Pod
	// Complete says every GPU pod's UID is known, so a pod not among Pods
	// was given no GPU.
	Complete bool
	// Running are the UIDs of the pods this node runs, GPU or not (their
	// log directories).
	Running map[string]bool
}

// given reports whether a device id the kubelet handed out names g by its
// UUID, one of its MIG devices' UUIDs, or its index (the device plugin's
// index strategy).
func given(id string, g *snapshot.GPUUse) bool {
	if id == g.UUID || id == strconv.Itoa(g.Index) {
		return true
	}
	return slices.ContainsFunc(g.MIG, func(m snapshot.MIGUse) bool { return m.UUID != "" && m.UUID == id })
}

// PodsOf returns the pods given g.
func (a *Allocations) PodsOf(g *snapshot.GPUUse) []Pod {
	var out []Pod
	for _, p := range a.Pods {
		if p.has(g) {
			out = append(out, p)
		}
	}
	return out
}

// ByMinor says whether a pod's GPUs are known by minor number alone (a DRA
// device). A GPU whose minor NVML did not give cannot be matched to them.
func (a *Allocations) ByMinor() bool {
	return slices.ContainsFunc(a.Pods, func(p Pod) bool { return len(p.Claims) > 0 })
}

// NotUnderstood names each pod whose allocation is not known, and why. A
// GPU of the node may be that pod's or not.
func (a *Allocations) NotUnderstood() []string {
	var out []string
	for i := range a.Pods {
		if why := a.Pods[i].notUnderstood(); why != "" {
			out = append(out, why)
		}
	}
	return out
}

// Outside reports whether a process of the pod with this UID that uses g
// does so outside its pod's allocation, and whether that can be told. It
// is outside when the pod's whole allocation lacks g, or when every GPU
// pod is known and the pod was given no GPU. It cannot be told for a pod
// whose allocation is not understood.
func (a *Allocations) Outside(podUID string, g *snapshot.GPUUse) (outside, known bool) {
	if podUID == "" {
		return false, false
	}
	for i := range a.Pods {
		p := &a.Pods[i]
		if p.UID != podUID {
			continue
		}
		if p.has(g) {
			return false, true
		}
		if p.notUnderstood() != "" {
			return false, false
		}
		return true, true
	}
	return a.Complete, a.Complete
}

// GPUsOf is the GPUs the pod with this UID was given, and whether that is
// known. It is known when the kubelet lists the pod's GPUs, or lists every
// GPU pod (Complete) but not this running one, which then has the empty
// set. A numeric id is an NVML index, which gpus makes a UUID. An
// allocation not understood gives an error wrapping ErrNotUnderstood.
func (a *Allocations) GPUsOf(podUID string, gpus []snapshot.GPU) (*snapshot.GPUSet, bool, error) {
	for _, p := range a.Pods {
		if p.UID == "" || p.UID != podUID {
			continue
		}
		if why := p.notUnderstood(); why != "" {
			return nil, false, fmt.Errorf("kubelet: %w: %s", ErrNotUnderstood, why)
		}
		ids := make([]string, len(p.GPUs), len(p.GPUs)+len(p.Claims))
		for i, id := range p.GPUs {
			n, err := strconv.Atoi(id)
			if err != nil {
				ids[i] = id
				continue
			}
			j := slices.IndexFunc(gpus, func(g snapshot.GPU) bool { return g.Index == n && g.UUID != "" })
			if j < 0 {
				return nil, true, fmt.Errorf("kubelet: pod %s/%s was given GPU index %d, which NVML does not list (it is read as an NVML index, not a minor number)", p.Namespace, p.Name, n)
			}
			ids[i] = gpus[j].UUID
		}
		for _, c := range p.Claims {
			for _, n := range c.Minors {
				ids = append(ids, strconv.Itoa(n))
			}
		}
		set, err := snapshot.ParseGPUList(strings.Join(ids, ","))
		if err != nil {
			return nil, true, fmt.Errorf("kubelet: GPUs of pod %s/%s: %w", p.Namespace, p.Name, err)
		}
		return &set, true, nil
	}
	if a.Complete && a.Running[podUID] {
		return &snapshot.GPUSet{}, true, nil
	}
	return nil, false, nil
}

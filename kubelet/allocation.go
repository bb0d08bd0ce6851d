// Package kubelet holds what the kubelet of this node says about its pods:
// which pod was given which GPU, joined to each pod's UID, which is what a
// process's cgroup names. It is plain data and the rules on it; package
// podresources reads it from the kubelet.
package kubelet

import (
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
	// UID is the pod's UID, as its processes' cgroups name it; "" when no
	// directory of the pod log directory names the pod once.
	UID string `json:"uid,omitempty"`
	// GPUs are the device ids of the pod's nvidia.com/gpu (and MIG)
	// resources: GPU UUIDs under the device plugin's default uuid strategy,
	// GPU indexes under its index strategy, MIG UUIDs under mixed MIG.
	GPUs []string `json:"gpus"`
}

// Allocations are a node's GPU pods, looked up by GPU and by pod UID.
type Allocations struct {
	Pods []Pod
	// Complete says every GPU pod's UID is known: a process of a pod not
	// among Pods is then a pod given no GPU.
	Complete bool
	// Running are the UIDs of the pods this node runs, GPU or not (their
	// log directories).
	Running map[string]bool
}

// given reports whether a device id the kubelet handed out names g: its
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
		if slices.ContainsFunc(p.GPUs, func(id string) bool { return given(id, g) }) {
			out = append(out, p)
		}
	}
	return out
}

// Outside reports whether a process of the pod with this UID that uses g
// does so outside its pod's allocation, and whether that can be told: the
// pod is known and was not given g, or (every GPU pod being known) the pod
// was given no GPU at all.
func (a *Allocations) Outside(podUID string, g *snapshot.GPUUse) (outside, known bool) {
	if podUID == "" {
		return false, false
	}
	for _, p := range a.Pods {
		if p.UID == podUID {
			return !slices.ContainsFunc(p.GPUs, func(id string) bool { return given(id, g) }), true
		}
	}
	return a.Complete, a.Complete
}

// GPUsOf is the GPUs the pod with this UID was given, and whether that is
// known. It is when the kubelet lists the pod's GPUs, or lists every GPU pod
// (Complete) but not this running one, which then has the empty set. A
// numeric device id is an NVML index (the plugin's index strategy), which
// gpus turns into a UUID.
func (a *Allocations) GPUsOf(podUID string, gpus []snapshot.GPU) (*snapshot.GPUSet, bool, error) {
	for _, p := range a.Pods {
		if p.UID == "" || p.UID != podUID {
			continue
		}
		ids := make([]string, len(p.GPUs))
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

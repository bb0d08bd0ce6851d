package kubelet

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gpusnap/gpusnap/snapshot"
)

// Allocations are a node's GPU pods, looked up by GPU and by pod UID.
type Allocations struct {
	Pods []Pod
	// Complete says every GPU pod's UID is known: a process of a pod not
	// among Pods is then a pod given no GPU.
	Complete bool
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

// GPUsOf is the GPUs the pod with this UID was given, as a scheduler's
// allocation, and whether the kubelet listed the pod with a GPU.
func (a *Allocations) GPUsOf(podUID string) (*snapshot.GPUSet, bool, error) {
	for _, p := range a.Pods {
		if p.UID != "" && p.UID == podUID {
			set, err := snapshot.ParseGPUList(strings.Join(p.GPUs, ","))
			if err != nil {
				return nil, true, fmt.Errorf("kubelet: GPUs of pod %s/%s: %w", p.Namespace, p.Name, err)
			}
			return &set, true, nil
		}
	}
	return nil, false, nil
}

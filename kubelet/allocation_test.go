package kubelet

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/snapshot"
)

func TestAllocations(t *testing.T) {
	const uidTrain, uidMIG = "0f6c1a52-8a3e-4c1b-9d7e-2b5f4a6c8d10", "7d2e9b40-1c5a-4f3e-8b6d-9a0c2e4f6b81"
	const gpuA, gpuB = "GPU-3f2a6b1c-0d4e-4f5a-8b9c-1d2e3f4a5b6c", "GPU-8f2c7d3e-4a5b-4c6d-9e8f-0a1b2c3d4e5f"
	const migA = "MIG-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"
	gpu0 := &snapshot.GPUUse{Index: 0, UUID: gpuA}
	gpu1 := &snapshot.GPUUse{Index: 1, UUID: gpuB, MIG: []snapshot.MIGUse{{UUID: migA}}}
	a := &Allocations{Complete: true, Pods: []Pod{
		{Namespace: "ml", Name: "train-0", UID: uidTrain, GPUs: []string{gpuA}},
		{Namespace: "infer", Name: "mig-0", UID: uidMIG, GPUs: []string{migA}},
		{Namespace: "idx", Name: "by-index", UID: "idx-uid", GPUs: []string{"1"}},
	}}
	if p := a.PodsOf(gpu0); len(p) != 1 || p[0].Name != "train-0" {
		t.Errorf("pods of GPU 0: %+v", p)
	}
	if p := a.PodsOf(gpu1); len(p) != 2 || p[0].Name != "mig-0" || p[1].Name != "by-index" {
		t.Errorf("pods of GPU 1 (a MIG device of it, and by index): %+v", p)
	}
	for _, c := range []struct {
		uid           string
		gpu           *snapshot.GPUUse
		outside, know bool
	}{
		{uidTrain, gpu0, false, true},
		{uidTrain, gpu1, true, true},
		{uidMIG, gpu1, false, true},
		{"other-pod", gpu0, true, true}, // a pod given no GPU
		{"", gpu0, false, false},        // no pod: nothing to say
	} {
		if out, know := a.Outside(c.uid, c.gpu); out != c.outside || know != c.know {
			t.Errorf("Outside(%s, GPU %d) = %v, %v; want %v, %v", c.uid, c.gpu.Index, out, know, c.outside, c.know)
		}
	}
	// NVML's devices: index 1 is the GPU of minor number 3 on this host.
	nvml := []snapshot.GPU{{Index: 0, UUID: gpuA, MinorNumber: intPtr(2)}, {Index: 1, UUID: gpuB, MinorNumber: intPtr(3)}}
	if set, ok, err := a.GPUsOf(uidTrain, nvml); !ok || err != nil || len(set.UUIDs) != 1 || set.UUIDs[0] != gpuA {
		t.Errorf("GPUs of train-0: %+v, %v, %v", set, ok, err)
	}
	// The index strategy's "1" is NVML index 1, not minor number 1.
	if set, ok, err := a.GPUsOf("idx-uid", nvml); !ok || err != nil || len(set.Minors) != 0 || len(set.UUIDs) != 1 || set.UUIDs[0] != gpuB {
		t.Errorf("GPUs of by-index (index strategy): %+v, %v, %v", set, ok, err)
	}
	if _, ok, err := a.GPUsOf("idx-uid", nil); !ok || err == nil || !strings.Contains(err.Error(), "GPU index 1, which NVML does not list") {
		t.Errorf("an index without NVML: ok %v, %v", ok, err)
	}
	// AMD's and Intel's plugins' ids are the devices' accelerator IDs.
	rocm := Allocations{Pods: []Pod{{Namespace: "ml", Name: "rocm", UID: "rocm-uid", GPUs: []string{"0000:83:00.0", "card1"}}}}
	if set, ok, err := rocm.GPUsOf("rocm-uid", nil); !ok || err != nil || set.String() != "0000:83:00.0,card1" {
		t.Errorf("GPUs of an AMD and Intel pod: %+v, %v, %v", set, ok, err)
	}
	// Every GPU pod is listed: a pod this node runs among none of them was
	// given no GPU; one it does not run (yet) is not known.
	const noGPU, notYet = "3a9f0c11-5b2d-4e6f-8a7c-1d2e3f4a5b6c", "8d1e2f30-4a5b-4c6d-9e7f-8091a2b3c4d5"
	a.Running = map[string]bool{uidTrain: true, uidMIG: true, noGPU: true}
	if set, ok, err := a.GPUsOf(noGPU, nvml); !ok || err != nil || set == nil || set.String() != "" {
		t.Errorf("a pod given no GPU: %+v, %v, %v; want the empty set", set, ok, err)
	}
	if _, ok, _ := a.GPUsOf(notYet, nvml); ok {
		t.Error("a pod this node does not run yet was given an allocation")
	}
	if _, ok, _ := a.GPUsOf("job-4242", nvml); ok {
		t.Error("a tenant that is no pod UID was given an allocation by the kubelet")
	}
	// With a GPU pod whose UID is unknown, an unknown pod may be that one.
	a.Complete = false
	if _, ok, _ := a.GPUsOf(noGPU, nvml); ok {
		t.Error("incomplete: an unlisted pod was given no GPU")
	}
	if out, know := a.Outside("other-pod", gpu0); out || know {
		t.Errorf("incomplete: Outside(other-pod) = %v, %v; want false, false", out, know)
	}
}

func intPtr(n int) *int { return &n }

// DRA devices are GPUs by minor number; two pods sharing a GPU are each
// inside their own allocation on it; a pod whose allocation is not
// understood is neither given nothing nor outside anything.
func TestAllocationsDRA(t *testing.T) {
	const gpuA, gpuB = "GPU-3f2a6b1c-0d4e-4f5a-8b9c-1d2e3f4a5b6c", "GPU-8f2c7d3e-4a5b-4c6d-9e8f-0a1b2c3d4e5f"
	gpu0 := &snapshot.GPUUse{Index: 0, UUID: gpuA, MinorNumber: intPtr(2)}
	gpu1 := &snapshot.GPUUse{Index: 1, UUID: gpuB, MinorNumber: intPtr(3)}
	claim := func(minor int, why string) ClaimDevice {
		return ClaimDevice{Claim: "ml/c", Driver: "gpu.nvidia.com", Device: "gpu-x", Minors: []int{minor}, NotUnderstood: why}
	}
	a := &Allocations{Complete: true, Pods: []Pod{
		{Namespace: "ml", Name: "a", UID: "uid-a", Claims: []ClaimDevice{claim(2, "")}, Shared: true},
		{Namespace: "ml", Name: "b", UID: "uid-b", GPUs: []string{gpuA}, Shared: true},
		{Namespace: "ml", Name: "c", UID: "uid-c", Claims: []ClaimDevice{claim(3, ""), {Claim: "ml/x", Driver: "gpu.example.com", NotUnderstood: "driver gpu.example.com is not one gpusnap knows"}}},
	}}
	if p := a.PodsOf(gpu0); len(p) != 2 || p[0].Name != "a" || p[1].Name != "b" {
		t.Errorf("pods of the shared GPU 0: %+v", p)
	}
	for _, c := range []struct {
		uid           string
		gpu           *snapshot.GPUUse
		outside, know bool
	}{
		{"uid-a", gpu0, false, true},
		{"uid-b", gpu0, false, true},
		{"uid-a", gpu1, true, true},
		{"uid-c", gpu1, false, true},  // its resolved device
		{"uid-c", gpu0, false, false}, // its other device may be any GPU
	} {
		if out, know := a.Outside(c.uid, c.gpu); out != c.outside || know != c.know {
			t.Errorf("Outside(%s, GPU %d) = %v, %v; want %v, %v", c.uid, c.gpu.Index, out, know, c.outside, c.know)
		}
	}
	if set, ok, err := a.GPUsOf("uid-a", nil); !ok || err != nil || set.String() != "2" {
		t.Errorf("GPUs of pod a: %v, %v, %v; want minor 2", set, ok, err)
	}
	if set, ok, err := a.GPUsOf("uid-c", nil); ok || set != nil || !errors.Is(err, ErrNotUnderstood) || !strings.Contains(err.Error(), "gpu.example.com") {
		t.Errorf("GPUs of pod c: %v, %v, %v; want not understood, the driver named", set, ok, err)
	}
	if why := a.NotUnderstood(); len(why) != 1 || !a.ByMinor() {
		t.Errorf("not understood %q, by minor %v", why, a.ByMinor())
	}
}

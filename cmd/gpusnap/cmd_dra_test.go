package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpusnap/gpusnap/kubelet/kubelettest"
)

// The gpuhost fixture's GPUs by NVML index (= minor): process 5000 of the
// tenant pod uses GPU 1; GPU 0 and GPU 3 are held by a container and a
// Slurm job, GPUs 2, 4, 5 and 6 hold memory no process accounts for: the
// "others" pod of each node below is given those, so that GPU 7 and any
// GPU of the tenant's that is no pod's are what check --idle checks.
const (
	fixtureGPU1 = "GPU-4a5b6c7d-1e2f-4a3b-8c4d-5e6f7a8b9c0d"
	fixtureGPU3 = "GPU-6c7d8e9f-3a4b-4c5d-8e6f-7a8b9c0d1e2f"
)

var fixtureBusyGPUs = []string{"GPU-5b6c7d8e-2f3a-4b4c-9d5e-6f7a8b9c0d1e", "GPU-7d8e9fa0-4b5c-4d6e-9f70-8b9c0d1e2f30",
	"GPU-8e9fa0b1-5c6d-4e7f-8081-9c0d1e2f3041", "GPU-9fa0b1c2-6d7e-4f80-9192-0d1e2f304152"}

// draNode is a Kubernetes node of the gpuhost fixture: a kubelet listing the
// tenant pod (UID fixturePodUID, process 5000) with what tenant gives it,
// beside a pod given GPU 0 time-sliced, GPU 3 by a renamed shared
// resource, and GPUs 2, 4, 5 and 6; its CDI spec directory holds the
// tenant's NVIDIA DRA claim specs.
type draNode struct {
	socket, logs, specs string
}

func newDRANode(t *testing.T, tenant func(specs string) *podresourcesv1.PodResources) draNode {
	n := draNode{logs: t.TempDir(), specs: t.TempDir()}
	pod := tenant(n.specs)
	others := kubelettest.Pod("ml", "others",
		kubelettest.Container("sliced", kubelettest.Devices("nvidia.com/gpu", fixtureGPU0+"::1")),
		kubelettest.Container("shared", kubelettest.Devices("nvidia.com/gpu.shared", fixtureGPU3+"::0")),
		kubelettest.Container("plain", kubelettest.Devices("nvidia.com/gpu", fixtureBusyGPUs...)))
	n.socket = kubelettest.Serve(t, &kubelettest.Lister{Pods: []*podresourcesv1.PodResources{pod, others}})
	for _, dir := range []string{"ml_" + pod.Name + "_" + fixturePodUID, "ml_others_5c6d7e8f-0a1b-4c2d-8e3f-405162738495"} {
		noErr(t, os.Mkdir(filepath.Join(n.logs, dir), 0o755))
	}
	return n
}

func (n draNode) flags() []string {
	return []string{"--proc-root", psFixture, "--nvml-fixture", nvmlFixture("h100x8.json"),
		"--pod-resources", n.socket, "--pod-logs", n.logs, "--cdi-spec-dir", n.specs}
}

// outOfAllocation runs baseline and diff --tenant of the tenant pod and
// returns the PIDs of its out_of_allocation_gpu_use findings, and the
// baseline's stderr.
func (n draNode) outOfAllocation(t *testing.T) ([]int, string) {
	t.Helper()
	db := []string{"--db", filepath.Join(t.TempDir(), "gpusnap.db")}
	code, _, baseErr := gpusnap(t, append(append([]string{"baseline", "--tenant", fixturePodUID}, n.flags()...), db...)...)
	if code != 0 {
		t.Fatalf("baseline: exit %d: %s", code, baseErr)
	}
	code, out, stderr := gpusnap(t, append([]string{"diff", "--json", "--tenant", fixturePodUID, "--proc-root", psFixture,
		"--nvml-fixture", nvmlFixture("h100x8.json")}, db...)...)
	var r struct {
		Findings []struct {
			Kind    string
			Process struct{ PID int }
		}
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil || code == 2 {
		t.Fatalf("diff: exit %d, %v: %s", code, err, stderr)
	}
	var pids []int
	for _, f := range r.Findings {
		if f.Kind == "out_of_allocation_gpu_use" {
			pids = append(pids, f.Process.PID)
		}
	}
	return pids, baseErr
}

// npd runs check --npd --idle and returns its exit status and NPD's line.
func (n draNode) npd(t *testing.T) (int, string) {
	t.Helper()
	code, out, _ := runCLI(t, append([]string{"check", "--npd", "--idle"}, n.flags()...)...)
	return code, strings.SplitN(out, "\n", 2)[0]
}

// Every allocation model, on the node a drain controller acts on: a pod's
// own use is inside its allocation, and check --npd --idle checks only the
// GPUs no pod was given; a use outside the allocation is one; a device
// gpusnap cannot resolve is said and never taken for "no GPU".
func TestDRAAllocations(t *testing.T) {
	const claimUID = "5d1c7a3e-0b2f-4c6d-8e9f-a1b2c3d4e5f6"
	dra := func(device string, minor int, shareID string) func(string) *podresourcesv1.PodResources {
		return func(specs string) *podresourcesv1.PodResources {
			cdi := kubelettest.NVIDIAClaimSpec(t, specs, claimUID, device, minor)
			return kubelettest.Pod("ml", "tenant", kubelettest.DRAContainer("worker",
				kubelettest.Claim("ml", "gpu", kubelettest.ClaimDevice("gpu.nvidia.com", "node-1", device, shareID, cdi))))
		}
	}
	devicePlugin := func(resource, id string) func(string) *podresourcesv1.PodResources {
		return func(string) *podresourcesv1.PodResources {
			return kubelettest.Pod("ml", "tenant", kubelettest.Container("worker", kubelettest.Devices(resource, id)))
		}
	}
	for _, c := range []struct {
		name    string
		tenant  func(string) *podresourcesv1.PodResources
		outside bool   // process 5000's use of GPU 1 is outside the pod's allocation
		npd     int    // check --npd --idle's exit status
		npdLine string // and the start of its line
	}{
		{"DRA pod", dra("gpu-1", 1, ""), false, 0, "no findings on GPUs "},
		{"DRA MIG device", dra("gpu-1-mig-9-4-4", 1, ""), false, 0, "no findings on GPUs "},
		{"shared DRA claim", dra("gpu-1", 1, "0b1c2d3e-4f50-4617-8293-a4b5c6d7e8f9"), false, 0, "no findings on GPUs "},
		{"time-sliced replica", devicePlugin("nvidia.com/gpu", fixtureGPU1+"::3"), false, 0, "no findings on GPUs "},
		{"renamed shared resource", devicePlugin("nvidia.com/gpu.shared", fixtureGPU1+"::0"), false, 0, "no findings on GPUs "},
		// Given GPU 2 (shared with the other pod) by DRA, its process uses
		// GPU 1, which no pod was given.
		{"DRA use outside", dra("gpu-2", 2, "0b1c2d3e-4f50-4617-8293-a4b5c6d7e8f9"), true, 1, "2 high: suspected_compromise: gpu_in_use of nvidia1 by 5000 "},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := newDRANode(t, c.tenant)
			pids, stderr := n.outOfAllocation(t)
			if outside := len(pids) > 0; outside != c.outside || (outside && pids[0] != 5000) {
				t.Errorf("out_of_allocation_gpu_use of %v, want 5000's: %v (baseline said %q)", pids, c.outside, stderr)
			}
			if code, line := n.npd(t); code != c.npd || !strings.HasPrefix(line, c.npdLine) {
				t.Errorf("check --npd --idle: exit %d %q, want %d %q...", code, line, c.npd, c.npdLine)
			}
		})
	}
}

// A device of a DRA driver gpusnap does not know, which no CDI spec
// resolves: the baseline says so and records no allocation (the pod's use
// is judged against none), and check --idle cannot tell which GPUs are idle.
func TestDRAUnknownDriver(t *testing.T) {
	n := newDRANode(t, func(string) *podresourcesv1.PodResources {
		return kubelettest.Pod("ml", "tenant", kubelettest.DRAContainer("worker",
			kubelettest.Claim("ml", "accel", kubelettest.ClaimDevice("gpu.example.com", "node-1", "accel-0", "", "gpu.example.com/accel=accel-0"))))
	})
	pids, stderr := n.outOfAllocation(t)
	if len(pids) != 0 || !strings.Contains(stderr, "driver gpu.example.com is not one gpusnap knows") || !strings.Contains(stderr, "the baseline records no allocation") {
		t.Errorf("out_of_allocation_gpu_use of %v; baseline said %q", pids, stderr)
	}
	code, line := n.npd(t)
	if code != 2 || !strings.HasPrefix(line, "unknown: --idle: ") || !strings.Contains(line, "not understood") {
		t.Errorf("check --npd --idle: exit %d %q, want 2 and the allocation not understood", code, line)
	}
}

package podresources

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpusnap/gpusnap/kubelet"
	"github.com/gpusnap/gpusnap/kubelet/kubelettest"
)

// podLogs makes a pod log directory with one directory per name.
func podLogs(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, n := range names {
		if err := os.Mkdir(filepath.Join(dir, n), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const (
	uidTrain = "0f6c1a52-8a3e-4c1b-9d7e-2b5f4a6c8d10"
	uidMIG   = "7d2e9b40-1c5a-4f3e-8b6d-9a0c2e4f6b81"
	gpuA     = "GPU-3f2a6b1c-0d4e-4f5a-8b9c-1d2e3f4a5b6c"
	gpuB     = "GPU-8f2c7d3e-4a5b-4c6d-9e8f-0a1b2c3d4e5f"
	migA     = "MIG-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"
)

func TestGPUPods(t *testing.T) {
	socket := kubelettest.Serve(t, &kubelettest.Lister{Pods: []*podresourcesv1.PodResources{
		// Two containers, one GPU each (one listed twice), and a device that is no GPU.
		kubelettest.Pod("ml", "train-0",
			kubelettest.Container("worker", kubelettest.Devices("nvidia.com/gpu", gpuB), kubelettest.Devices("example.com/nic", "nic0")),
			kubelettest.Container("sidecar", kubelettest.Devices("nvidia.com/gpu", gpuA, gpuB))),
		kubelettest.Pod("ml", "web"), // no GPU: not listed
		kubelettest.Pod("infer", "mig-0", kubelettest.Container("c", kubelettest.Devices("nvidia.com/mig-1g.10gb", migA))),
	}})
	logs := podLogs(t, "ml_train-0_"+uidTrain, "infer_mig-0_"+uidMIG, "ml_web_11111111-2222-3333-4444-555555555555", "not-a-pod")
	a, err := Read(context.Background(), Options{Socket: socket, PodLogs: logs})
	if err != nil {
		t.Fatal(err)
	}
	pods := a.Pods
	if !a.Complete {
		t.Error("allocations incomplete, though every pod's UID is known")
	}
	want := []kubelet.Pod{
		{Namespace: "ml", Name: "train-0", UID: uidTrain, GPUs: []string{gpuA, gpuB}},
		{Namespace: "infer", Name: "mig-0", UID: uidMIG, GPUs: []string{migA}},
	}
	if !reflect.DeepEqual(pods, want) {
		t.Errorf("pods:\n got %+v\nwant %+v", pods, want)
	}
}

// A pod whose UID cannot be told is returned, with the reason, never dropped.
func TestGPUPodsUnjoined(t *testing.T) {
	socket := kubelettest.Serve(t, &kubelettest.Lister{Pods: []*podresourcesv1.PodResources{
		kubelettest.Pod("ml", "train-0", kubelettest.Container("c", kubelettest.Devices("nvidia.com/gpu", gpuA))),
		kubelettest.Pod("ml", "train-1", kubelettest.Container("c", kubelettest.Devices("nvidia.com/gpu", gpuB))),
	}})
	// train-0's old pod (same name, another UID) still has its directory.
	logs := podLogs(t, "ml_train-0_"+uidTrain, "ml_train-0_"+uidMIG)
	a, err := Read(context.Background(), Options{Socket: socket, PodLogs: logs})
	if a == nil || a.Complete {
		t.Fatalf("allocations %+v: want them, incomplete", a)
	}
	pods := a.Pods
	if err == nil || !strings.Contains(err.Error(), "ml/train-0 (directories of 2 pods") || !strings.Contains(err.Error(), "ml/train-1 (no directory") {
		t.Errorf("error %v: want both pods named", err)
	}
	if len(pods) != 2 || pods[0].UID != "" || pods[1].UID != "" || pods[1].GPUs[0] != gpuB {
		t.Errorf("pods %+v: want both, without UIDs", pods)
	}
}

func TestGPUPodsErrors(t *testing.T) {
	// No kubelet: an error naming the socket, at once.
	missing := filepath.Join(t.TempDir(), "kubelet.sock")
	if a, err := Read(context.Background(), Options{Socket: missing}); a != nil || err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing socket: %v", err)
	}

	// A kubelet that does not answer: given up after the timeout.
	hung := kubelettest.Serve(t, &kubelettest.Lister{Hang: true})
	start := time.Now()
	_, err := Read(context.Background(), Options{Socket: hung, Timeout: 200 * time.Millisecond})
	if err == nil || time.Since(start) > 30*time.Second { // a hung kubelet hangs forever: 30 s is a loaded host's slack
		t.Errorf("hung kubelet: %v after %v", err, time.Since(start))
	}

	// An answer larger than any node's: refused, not read into memory (given
	// a minute, so the size refuses it on a loaded machine, not the clock).
	ids := make([]string, 0, 200_000)
	for i := range cap(ids) {
		ids = append(ids, strings.Repeat("x", 90)+string(rune('a'+i%26)))
	}
	huge := kubelettest.Serve(t, &kubelettest.Lister{Pods: []*podresourcesv1.PodResources{kubelettest.Pod("ml", "huge", kubelettest.Container("c", kubelettest.Devices("nvidia.com/gpu", ids...)))}})
	if _, err := Read(context.Background(), Options{Socket: huge, Timeout: time.Minute}); err == nil || !strings.Contains(err.Error(), "ResourceExhausted") {
		t.Errorf("an 18 MB answer: %v, want refused", err)
	}
}

// Every allocation model on one node, as the kubelet lists it: a DRA pod
// whose claim's CDI spec names its GPU, a DRA MIG device resolved to its
// parent, a claim two pods share, a device named gpu-N whose spec is gone,
// a time-sliced replica (::N), a renamed shared resource, a ComputeDomain
// channel (no GPU), a NIC of another DRA driver, and an unknown driver's
// device that nothing resolves: not understood, and the driver named.
func TestDRAPods(t *testing.T) {
	specs := t.TempDir()
	const claimTrain, claimMIG, claimShared = "5d1c7a3e-0b2f-4c6d-8e9f-a1b2c3d4e5f6", "6e2d8b4f-1c3a-4d7e-9f0a-b2c3d4e5f607", "7f3e9c50-2d4b-4e8f-a01b-c3d4e5f60718"
	train := kubelettest.NVIDIAClaimSpec(t, specs, claimTrain, "gpu-1", 1)
	mig := kubelettest.NVIDIAClaimSpec(t, specs, claimMIG, "gpu-3-mig-9-4-4", 3)
	shared := kubelettest.NVIDIAClaimSpec(t, specs, claimShared, "gpu-5", 5)
	nic := "nic.example.com/vf=eth1"
	if err := os.WriteFile(filepath.Join(specs, "nic.yaml"), []byte("kind: nic.example.com/vf\ndevices:\n- name: eth1\n  containerEdits:\n    deviceNodes:\n    - path: /dev/vfio/7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gpuDRA := func(claim, device, share string, cdi ...string) *podresourcesv1.DynamicResource {
		return kubelettest.Claim("ml", claim, kubelettest.ClaimDevice("gpu.nvidia.com", "node-1", device, share, cdi...))
	}
	socket := kubelettest.Serve(t, &kubelettest.Lister{Pods: []*podresourcesv1.PodResources{
		kubelettest.Pod("ml", "dra", kubelettest.DRAContainer("worker", gpuDRA("train", "gpu-1", "", train))),
		kubelettest.Pod("ml", "dra-mig", kubelettest.DRAContainer("worker", gpuDRA("mig", "gpu-3-mig-9-4-4", "", mig))),
		kubelettest.Pod("ml", "share-a", kubelettest.DRAContainer("worker", gpuDRA("shared", "gpu-5", "0b1c2d3e-4f50-4617-8293-a4b5c6d7e8f9", shared))),
		kubelettest.Pod("ml", "share-b", kubelettest.DRAContainer("worker", gpuDRA("shared", "gpu-5", "1c2d3e4f-5061-4728-93a4-b5c6d7e8f90a", shared))),
		kubelettest.Pod("ml", "by-name", kubelettest.DRAContainer("worker", gpuDRA("old", "gpu-6", "", "k8s.gpu.nvidia.com/claim=gone-gpu-6"))),
		kubelettest.Pod("ml", "sliced", kubelettest.Container("worker", kubelettest.Devices("nvidia.com/gpu", gpuA+"::3"))),
		kubelettest.Pod("ml", "renamed", kubelettest.Container("worker", kubelettest.Devices("nvidia.com/gpu.shared", gpuB+"::0"))),
		kubelettest.Pod("ml", "rocm", kubelettest.Container("worker", kubelettest.Devices("amd.com/gpu", "0000:83:00.0", "0000:03:00.0"))),
		kubelettest.Pod("ml", "xe", kubelettest.Container("worker", kubelettest.Devices("gpu.intel.com/xe", "card1-0"))),
		kubelettest.Pod("ml", "i915-shared", kubelettest.Container("worker", kubelettest.Devices("gpu.intel.com/i915", "card0-1"))),
		kubelettest.Pod("ml", "mixed",
			kubelettest.Container("plugin", kubelettest.Devices("nvidia.com/mig-1g.10gb", migA)),
			kubelettest.DRAContainer("dra", gpuDRA("train", "gpu-1", "", train),
				kubelettest.Claim("ml", "imex", kubelettest.ClaimDevice("compute-domain.nvidia.com", "node-1", "channel-0", "", "k8s.compute-domain.nvidia.com/channel=x")),
				kubelettest.Claim("ml", "nic", kubelettest.ClaimDevice("nic.example.com", "node-1", "eth1", "", nic)))),
		kubelettest.Pod("ml", "unknown", kubelettest.DRAContainer("worker",
			kubelettest.Claim("ml", "accel", kubelettest.ClaimDevice("gpu.example.com", "node-1", "accel-0", "", "gpu.example.com/accel=accel-0")))),
	}})
	a, err := Read(context.Background(), Options{Socket: socket, PodLogs: t.TempDir(), CDISpecDirs: []string{specs}})
	if a == nil {
		t.Fatal(err)
	}
	if err == nil || !errors.Is(err, kubelet.ErrNotUnderstood) || !strings.Contains(err.Error(), "pod ml/unknown: claim ml/accel device gpu.example.com/node-1/accel-0: driver gpu.example.com is not one gpusnap knows") {
		t.Errorf("error %v: want the unknown driver's pod not understood, the driver named", err)
	}
	got := map[string]string{}
	for _, p := range a.Pods {
		var minors []string
		for _, c := range p.Claims {
			minors = append(minors, fmt.Sprint(c.Minors))
		}
		got[p.Name] = fmt.Sprintf("%v %s shared=%v", p.GPUs, strings.Join(minors, ""), p.Shared)
	}
	want := map[string]string{
		"dra":         "[] [1] shared=false",
		"dra-mig":     "[] [3] shared=false",
		"share-a":     "[] [5] shared=true",
		"share-b":     "[] [5] shared=true",
		"by-name":     "[] [6] shared=false",
		"sliced":      "[" + gpuA + "]  shared=true",
		"renamed":     "[" + gpuB + "]  shared=true",
		"rocm":        "[0000:03:00.0 0000:83:00.0]  shared=false",
		"xe":          "[card1]  shared=false",
		"i915-shared": "[card0]  shared=true",
		"mixed":       "[" + migA + "] [1] shared=false",
		"unknown":     "[] [] shared=false",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("pods:\n got %v\nwant %v", got, want)
	}
	if why := a.NotUnderstood(); len(why) != 1 || !strings.HasPrefix(why[0], "pod ml/unknown: ") {
		t.Errorf("not understood: %q, want the unknown driver's pod alone", why)
	}
}

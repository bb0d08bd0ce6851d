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

// The gpuhost fixture's process 5000 runs in pod 1a2b3c4d-... (its cgroup)
// and holds and maps /dev/nvidia1; the kubelet gave that pod GPU 0 alone.
const (
	fixturePodUID = "1a2b3c4d-5e6f-7a8b-9c0d-112233445566"
	fixtureGPU0   = "GPU-3f2a1c0e-8d4b-4e5f-9a1b-2c3d4e5f6071"
)

func TestPsPodAllocations(t *testing.T) {
	socket := kubelettest.Serve(t, &kubelettest.Lister{Pods: []*podresourcesv1.PodResources{
		kubelettest.Pod("ml", "train-0", kubelettest.Container("worker", kubelettest.Devices("nvidia.com/gpu", fixtureGPU0))),
	}})
	logs := t.TempDir()
	if err := os.Mkdir(filepath.Join(logs, "ml_train-0_"+fixturePodUID), 0o755); err != nil {
		t.Fatal(err)
	}
	args := []string{"ps", "--proc-root", psFixture, "--nvml-fixture", nvmlFixture("h100x8.json"), "--pod-resources", socket, "--pod-logs", logs}
	code, out, stderr := runCLI(t, args...)
	if code != 0 {
		t.Fatalf("ps: exit %d: %s", code, stderr)
	}
	gpu0, gpu1 := section(out, "0"), section(out, "1")
	if !strings.Contains(gpu0, "allocated to: ml/train-0 ("+fixturePodUID+")") || strings.Contains(gpu0, "OUTSIDE") {
		t.Errorf("GPU 0 section:\n%s", gpu0)
	}
	if !strings.Contains(gpu1, "allocated to: no pod") ||
		!strings.Contains(gpu1, "OUTSIDE ALLOCATION: 5000 ") || !strings.Contains(gpu1, "of pod ml/train-0 ("+fixturePodUID+") uses this GPU") {
		t.Errorf("GPU 1 section:\n%s", gpu1)
	}

	code, out, stderr = runCLI(t, append(args, "--json")...)
	var rep struct {
		Pods []struct{ Namespace, Name, UID string }
	}
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil || len(rep.Pods) != 1 || rep.Pods[0].UID != fixturePodUID {
		t.Errorf("ps --json: exit %d, %v, pods %+v: %s", code, err, rep.Pods, stderr)
	}
}

// A kubelet asked for and not there is a line on stderr; ps still triages.
func TestPsPodResourcesMissing(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "kubelet.sock")
	code, out, stderr := runCLI(t, "ps", "--proc-root", psFixture, "--nvml-fixture", nvmlFixture("h100x8.json"), "--pod-resources", missing)
	if code != 0 || !strings.Contains(stderr, "kubelet pod-resources "+missing) || !strings.Contains(out, "GPU 1 ") || strings.Contains(out, "allocated to") {
		t.Errorf("ps with no kubelet: exit %d, stderr %q\n%s", code, stderr, out)
	}
}

// A pod's baseline takes its GPUs from the kubelet; its process that uses
// another GPU is out_of_allocation_gpu_use, by the one allocation rule. A
// pod the kubelet does not list among its GPU pods was given no GPU: any GPU
// its process uses is outside.
func TestBaselinePodAllocation(t *testing.T) {
	for _, c := range []struct {
		name   string
		pod    *podresourcesv1.PodResources
		podUID string // the kubelet's pod's UID, by its log directory
		alloc  string // in the baseline's JSON
	}{
		{"given GPU 0", kubelettest.Pod("ml", "train-0", kubelettest.Container("worker", kubelettest.Devices("nvidia.com/gpu", fixtureGPU0))),
			fixturePodUID, fixtureGPU0},
		// The tenant pod runs here (its log directory), the kubelet lists
		// another as its one GPU pod.
		{"given no GPU", kubelettest.Pod("ml", "other-0", kubelettest.Container("worker", kubelettest.Devices("nvidia.com/gpu", fixtureGPU0))),
			"5c6d7e8f-0a1b-4c2d-8e3f-405162738495", `"allocation": {}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			socket := kubelettest.Serve(t, &kubelettest.Lister{Pods: []*podresourcesv1.PodResources{c.pod}})
			logs := t.TempDir()
			for _, dir := range []string{"ml_" + c.pod.Name + "_" + c.podUID, "ml_tenant_" + fixturePodUID} {
				if err := os.MkdirAll(filepath.Join(logs, dir), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			db := filepath.Join(t.TempDir(), "gpusnap.db")
			host := []string{"--db", db, "--proc-root", psFixture, "--nvml-fixture", nvmlFixture("h100x8.json")}
			code, out, stderr := gpusnap(t, append([]string{"baseline", "--json", "--tenant", fixturePodUID, "--pod-resources", socket, "--pod-logs", logs}, host...)...)
			if code != 0 || !strings.Contains(out, c.alloc) {
				t.Fatalf("baseline of the pod: exit %d, no allocation %s: %s\n%.3000s", code, c.alloc, stderr, out)
			}
			code, out, stderr = gpusnap(t, append([]string{"diff", "--json", "--tenant", fixturePodUID}, host...)...)
			var r struct {
				Findings []struct {
					Kind    string
					GPUUUID string `json:"gpu_uuid"`
					Process struct{ PID int }
				}
			}
			if err := json.Unmarshal([]byte(out), &r); err != nil || code != exitFindings {
				t.Fatalf("diff: exit %d, %v: %s", code, err, stderr)
			}
			found := false
			for _, f := range r.Findings {
				if f.Kind == "out_of_allocation_gpu_use" {
					found = true
					if f.Process.PID != 5000 || f.GPUUUID != "GPU-4a5b6c7d-1e2f-4a3b-8c4d-5e6f7a8b9c0d" {
						t.Errorf("out_of_allocation_gpu_use of pid %d on %s, want 5000 on GPU 1", f.Process.PID, f.GPUUUID)
					}
				}
			}
			if !found {
				t.Errorf("no out_of_allocation_gpu_use for the pod's process 5000 on GPU 1: %+v", r.Findings)
			}
		})
	}
}

// A pod the kubelet does not run yet (no log directory, not listed) is not
// taken for a pod given no GPU: the baseline records no allocation and says
// so on stderr.
func TestBaselinePodNotRunningYet(t *testing.T) {
	socket := kubelettest.Serve(t, &kubelettest.Lister{Pods: []*podresourcesv1.PodResources{
		kubelettest.Pod("ml", "other-0", kubelettest.Container("worker", kubelettest.Devices("nvidia.com/gpu", fixtureGPU0))),
	}})
	logs := t.TempDir()
	if err := os.Mkdir(filepath.Join(logs, "ml_other-0_5c6d7e8f-0a1b-4c2d-8e3f-405162738495"), 0o755); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	code, out, stderr := gpusnap(t, "baseline", "--json", "--tenant", fixturePodUID, "--pod-resources", socket, "--pod-logs", logs,
		"--db", db, "--proc-root", psFixture, "--nvml-fixture", nvmlFixture("h100x8.json"))
	if code != 0 || strings.Contains(out, `"allocation"`) || !strings.Contains(stderr, "does not run it (yet): the baseline records no allocation") {
		t.Errorf("baseline of a pod not running yet: exit %d, stderr %q, allocation in the output: %v", code, stderr, strings.Contains(out, `"allocation"`))
	}
}

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpusnap/gpusnap/internal/livetest"
	"github.com/gpusnap/gpusnap/kubelet/kubelettest"
)

// TestNRIGateIsThePodBaseline drives gpusnap nri through NRI's own runtime
// side where the kubelet lists the pod's GPU (fake GPU 6, a DRA claim) at
// RunPodSandbox. A squatter maps the GPU at the pod's baseline and lets go
// before the pod's container is created. The sandbox is refused, naming it,
// because a check at CreateContainer alone would have passed. The runtime's
// retry, with the GPU free, goes ahead. Its GPU init container leaves a
// process on the GPU, and the next container is refused, naming that
// process.
func TestNRIGateIsThePodBaseline(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("NRI live test: needs root (loop devices, mknod)")
	}
	dir, nodes, allow := fakeGPUNode(t, "gpusnap-nri-gate-", 6)
	const uid, claimUID = "abababab-0000-4000-8000-000000000007", "1a2b3c4d-5e6f-4a0b-8c1d-2e3f4a5b6c7d"
	specs, logs := filepath.Join(dir, "cdi"), filepath.Join(dir, "pods")
	noErr(t, os.Mkdir(specs, 0o755))
	noErr(t, os.MkdirAll(filepath.Join(logs, "ml_squatted_"+uid), 0o755))
	cdi := kubelettest.NVIDIAClaimSpec(t, specs, claimUID, "gpu-6", 6)
	kubelet := kubelettest.Serve(t, &kubelettest.Lister{Pods: []*podresourcesv1.PodResources{kubelettest.Pod("ml", "squatted",
		kubelettest.DRAContainer("worker", kubelettest.Claim("ml", "gpu", kubelettest.ClaimDevice("gpu.nvidia.com", "node-1", "gpu-6", "", cdi))))}})
	rt := startNRIRuntime(t, dir)
	var stderr livetest.LockedBuffer
	plugin := gpusnapProc("--no-nvml", "--db", filepath.Join(dir, "gpusnap.db"), "nri", "--socket", filepath.Join(dir, "nri.sock"),
		"--evidence-dir", filepath.Join(dir, "evidence"), "--allow", allow, "--syslog-socket", filepath.Join(dir, "log.sock"),
		"--pod-resources", kubelet, "--pod-logs", logs, "--cdi-spec-dir", specs)
	syslogSink(t, filepath.Join(dir, "log.sock"))
	plugin.Stderr = &stderr
	noErr(t, plugin.Start())
	t.Cleanup(func() { _ = plugin.Process.Kill(); _ = plugin.Wait() })
	waitUntil(t, "the plugin to synchronize", stderr.String, func() bool { return strings.Contains(stderr.String(), "synchronized with ") })

	p := pod(uid, "squatted")
	squatter := livetest.StartGhost(t, &livetest.Loop{Node: nodes[0]}, livetest.Options{Exe: filepath.Join(dir, "bin", "squatter")}).Ghost
	err := rt.tryRun(p)
	squatter.Kill(t)
	if want := fmt.Sprintf("gpu_in_use of nvidia6 by %d", squatter.PID); err == nil || !strings.Contains(err.Error(), "GPUs 6 not clean") ||
		!strings.Contains(err.Error(), want) {
		// Before, the sandbox went ahead, and the container's check, the squatter gone, passed.
		cerr := rt.create(p, gpuContainer(p, 6))
		t.Fatalf("RunPodSandbox with a squatter at the baseline: %v (then CreateContainer: %v), want a refusal naming %q\n%s", err, cerr, want, stderr.String())
	}

	// The runtime tries again: a new baseline, the GPU free.
	if err := rt.tryRun(p); err != nil {
		t.Fatalf("RunPodSandbox again, the GPU free: %v\n%s", err, stderr.String())
	}
	init := gpuContainer(p, 6)
	init.Name, init.Id = "init", init.Id+"-init"
	if err := rt.create(p, init); err != nil {
		t.Fatalf("the init container refused: %v\n%s", err, stderr.String())
	}
	left := livetest.StartGhost(t, &livetest.Loop{Node: nodes[0]}, livetest.Options{Exe: filepath.Join(dir, "bin", "init")}).Ghost
	err = rt.create(p, gpuContainer(p, 6))
	if want := fmt.Sprintf("gpu_in_use of nvidia6 by %d", left.PID); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("the worker after an init container's leftover: %v, want a refusal naming %q", err, want)
	}
}

package main

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/adaptation"

	"github.com/gpusnap/gpusnap/internal/livetest"
	"github.com/gpusnap/gpusnap/kubelet/kubelettest"
)

// draContainer is a container given a DRA claim's device as the runtime
// hands it to NRI at CreateContainer: its CDI device name, before the
// runtime injects the nodes the claim's spec lists.
func draContainer(p *adaptation.PodSandbox, name, cdiDevice string) *adaptation.Container {
	return &adaptation.Container{Id: "ctr-" + p.Id + "-" + name, PodSandboxId: p.Id, Name: name,
		CDIDevices: []*adaptation.CDIDevice{{Name: cdiDevice}}}
}

// TestNRIGatesDRAContainers drives gpusnap nri through NRI's own runtime
// side on the gpuhost fixture, where process 5000 holds GPU 1 and GPU 7 is
// clean: a container given GPU 1 by a DRA claim is refused with the check's
// reason, one given GPU 7 is let through, and one whose claim no CDI spec
// lists is checked against every GPU, and refused.
func TestNRIGatesDRAContainers(t *testing.T) {
	dir := t.TempDir()
	specs := t.TempDir()
	const dirtyClaim, cleanClaim = "5d1c7a3e-0b2f-4c6d-8e9f-a1b2c3d4e5f6", "6e2d8b4f-1c3a-4d7e-9f0a-b2c3d4e5f607"
	dirty := kubelettest.NVIDIAClaimSpec(t, specs, dirtyClaim, "gpu-1", 1)
	clean := kubelettest.NVIDIAClaimSpec(t, specs, cleanClaim, "gpu-7", 7)
	syslogSink(t, filepath.Join(dir, "log.sock"))
	rt := startNRIRuntime(t, dir)
	var stderr livetest.LockedBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"gpusnap", "--proc-root", psFixture, "--nvml-fixture", nvmlFixture("h100x8.json"),
			"--db", filepath.Join(dir, "gpusnap.db"), "nri", "--socket", filepath.Join(dir, "nri.sock"),
			"--evidence-dir", filepath.Join(dir, "evidence"), "--syslog-socket", filepath.Join(dir, "log.sock"),
			"--pod-resources", filepath.Join(dir, "no-kubelet.sock"), "--cdi-spec-dir", specs}, io.Discard, &stderr)
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("gpusnap nri: exit %d: %s", code, stderr.String())
		}
	})
	waitUntil(t, "the plugin to synchronize", stderr.String, func() bool { return strings.Contains(stderr.String(), "synchronized with ") })

	p := pod("eeeeeeee-0000-4000-8000-000000000005", "dra")
	rt.run(p)
	err := rt.create(p, draContainer(p, "dirty", dirty))
	if err == nil || !strings.Contains(err.Error(), "GPUs 1 not clean") || !strings.Contains(err.Error(), "gpu_in_use of nvidia1 by 5000") {
		t.Errorf("a DRA container on the dirty GPU 1: %v, want refused naming process 5000\n%s", err, stderr.String())
	}
	if err := rt.create(p, draContainer(p, "clean", clean)); err != nil {
		t.Errorf("a DRA container on the clean GPU 7 refused: %v\n%s", err, stderr.String())
	}
	err = rt.create(p, draContainer(p, "unknown", "k8s.gpu.nvidia.com/claim=7f3e9c50-2d4b-4e8f-a01b-c3d4e5f60718-gpu-7"))
	if err == nil || !strings.Contains(err.Error(), "GPUs all not clean") {
		t.Errorf("a DRA container whose claim no spec lists: %v, want every GPU checked and refused", err)
	}
}

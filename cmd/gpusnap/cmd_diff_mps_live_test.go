package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/internal/livetest"
	"github.com/gpusnap/gpusnap/snapshot"
)

// writeMPSFixture writes an NVML fixture of one GPU (minor 0, the loop
// node's nvidia0) under MPS: the server (0 for none) a compute process with
// its own context's 28 MiB, each client on the compute and the MPS list with
// 4 GiB, used memory their sum.
func writeMPSFixture(t *testing.T, path string, server int, clients ...int) {
	t.Helper()
	const gib = uint64(1) << 30
	mem := func(n uint64) *uint64 { return &n }
	compute, mps, used := []snapshot.GPUProcess{}, []snapshot.GPUProcess{}, uint64(0)
	if server != 0 {
		compute, used = append(compute, snapshot.GPUProcess{PID: server, UsedGPUMemory: mem(28 << 20)}), 28<<20
	}
	for _, c := range clients {
		p := snapshot.GPUProcess{PID: c, UsedGPUMemory: mem(4 * gib)}
		compute, mps, used = append(compute, p), append(mps, p), used+4*gib
	}
	g := snapshot.GPU{Index: 0, UUID: "GPU-5e1a0c3b-7d2f-4c8e-9a1b-2c3d4e5f6a7b", Name: "NVIDIA H100 80GB HBM3", MinorNumber: new(int),
		Memory:           &snapshot.Memory{Total: 80 * gib, Used: used, Free: 80*gib - used},
		ComputeProcesses: compute, GraphicsProcesses: []snapshot.GPUProcess{}, MPSProcesses: mps, MIGMode: new(int)}
	b, err := json.Marshal(map[string]any{"driver_version": "550.54.15", "cuda_driver_version": 12040, "devices": []snapshot.GPU{g}})
	if err == nil {
		err = os.WriteFile(path, b, 0o600)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// A real process named and placed as CUDA MPS's server
// (/var/lib/.../bin/nvidia-cuda-mps-server: the tenant helper, copied)
// opens and maps the loop device's node nvidia0 read-write after the
// tenant's baseline, and a client (NVML's MPS list names it) runs beside
// it. While the client lives the server serves it: diff raises nothing of
// the server and notes it, and the client is a finding. Once the client is
// killed and NVML lists the server alone, the server is a leftover holder
// and mapping like any process, its triage naming the control daemon's quit.
func TestLiveDiffMPSServer(t *testing.T) {
	livetest.Require(t, "losetup", "gcc")
	livetest.ShareKernelLog(t)
	loop := livetest.NewLoop(t)
	dir := t.TempDir()
	fixture := filepath.Join(dir, "nvml.json")
	writeMPSFixture(t, fixture, 0)
	const tenant = "live-mps"
	flags := []string{"--db", filepath.Join(dir, "gpusnap.db"), "--nvml-fixture", fixture}
	if code, _, stderr := gpusnap(t, append([]string{"baseline", "--tenant", tenant}, flags...)...); code != 0 {
		t.Fatalf("baseline: exit %d: %s", code, stderr)
	}
	// Where a package would install it, not a staging directory: no masquerade.
	bin, err := os.MkdirTemp("/var/lib", "gpusnap-mps-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(bin) })
	server := livetest.HoldAt(t, filepath.Join(bin, "bin", snapshot.MPSServerExe), loop.Node)
	client := livetest.Hold(t, loop.Node)
	writeMPSFixture(t, fixture, server.PID, client.PID)

	mine := func(r diff.Result, p livetest.Proc) map[string]diff.Finding {
		m := map[string]diff.Finding{}
		for _, f := range r.Findings {
			if f.Process != nil && f.Process.PID == p.PID && f.Process.StartTime == p.StartTime {
				m[f.Kind+" "+f.Device] = f
			}
		}
		return m
	}
	code, stdout, stderr := gpusnap(t, append([]string{"diff", "--json", "--tenant", tenant}, flags...)...)
	r := decodeResult(t, stdout, stderr)
	if code != exitFindings {
		t.Errorf("diff with the client alive: exit %d, want 1 (the client is new)", code)
	}
	if s := mine(r, server); len(s) != 0 {
		t.Errorf("the server %d serves a live client, yet: %+v", server.PID, s)
	}
	if c := mine(r, client); len(c) == 0 {
		t.Errorf("no finding for the client %d: %+v", client.PID, r.Findings)
	}
	note := strconv.Itoa(server.PID) + "@" + strconv.FormatUint(server.StartTime, 10) + " (nvidia-cuda-mps) is an MPS server with 1 live client at TO (pid " + strconv.Itoa(client.PID) + ")"
	if !strings.Contains(strings.Join(r.Notes, "\n"), note) {
		t.Errorf("notes %q lack %q", r.Notes, note)
	}

	client.Kill(t)
	writeMPSFixture(t, fixture, server.PID)
	code, stdout, stderr = gpusnap(t, append([]string{"diff", "--json", "--tenant", tenant}, flags...)...)
	r = decodeResult(t, stdout, stderr)
	if code != exitFindings {
		t.Errorf("diff with the server alone: exit %d, want 1", code)
	}
	s := mine(r, server)
	for _, k := range []string{diff.KindLeftoverDeviceHolder + " " + loop.Node, diff.KindLeftoverDeviceMapping + " " + loop.Node, diff.KindUnexpectedGPUProcess + " "} {
		f, ok := s[k]
		switch {
		case !ok:
			t.Errorf("no %q for the server %d left alone: %+v", k, server.PID, r.Findings)
		case f.Triage == nil || f.Triage.Class != diff.ClassLeftoverWorker || !strings.Contains(f.Triage.Next, "echo quit | nvidia-cuda-mps-control") ||
			!strings.Contains(strings.Join(f.Triage.Why, "\n"), "CUDA MPS's server"):
			t.Errorf("%s: triage %+v, want leftover_worker naming the control daemon's quit", k, f.Triage)
		case k != diff.KindUnexpectedGPUProcess+" " && f.Severity != diff.High:
			t.Errorf("%s: %s, want high (opened and mapped read-write)", k, f.Severity)
		}
	}
}

package bundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/ed25519"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/snapshot"
)

// hostileComm and friends are what a tenant can name its processes.
const (
	hostileComm = "<script>alert(1)</script>"
	hostileExe  = "/tmp/.x/\x1b[31mminer\xff"
)

var hostileCmdline = []string{"python3", "-c", "x\n- forged: line\x1b]0;pwned\x07", "`code` <img src=x onerror=alert(2)>", "bad\xfe\xffutf8"}

var t0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

func ptr[T any](v T) *T { return &v }

// testInput is a tenant's ghost: a forked child still mapping /dev/nvidia0
// read-write after its parent exited, a renamed miner from /tmp with a
// hostile name, and nvidia-persistenced unchanged at both ends.
func testInput() Input {
	persistenced := snapshot.Process{
		PID: 1200, StartTime: 500, Started: t0.Add(-48 * time.Hour), PPID: 1, Comm: "nvidia-persiste",
		Exe: "/usr/bin/nvidia-persistenced", UID: 0, User: "root",
		Holders: []snapshot.Holder{{FD: 3, Target: "/dev/nvidiactl", Access: "rw", Class: snapshot.ClassNVIDIA}},
	}
	ghostMap := snapshot.Mapping{Address: "7f0000000000-7f0000200000", Start: 0x7f0000000000, End: 0x7f0000200000, Size: 0x200000,
		Perms: "rw-s", Dev: "00:06", Inode: 811, Path: "/dev/nvidia0", DeviceNumber: snapshot.DeviceNumber{Major: 195}, DeviceType: "char",
		Class: snapshot.ClassNVIDIA, GPUMinor: ptr(0)}
	ghost := snapshot.Process{
		PID: 4243, StartTime: 987654, Started: t0.Add(30 * time.Minute), PPID: 1, Comm: "python3",
		Cmdline: []string{"python3", "train.py"}, Exe: "/usr/bin/python3.11", UID: 1001, User: "alice",
		Cgroups:     []string{"0::/system.slice/docker-" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" + ".scope"},
		ContainerID: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", ContainerRuntime: "docker",
		Mappings: []snapshot.Mapping{ghostMap},
		Holders:  []snapshot.Holder{{FD: 5, Target: "/dev/nvidia0", Access: "rw", Flags: "0100002", DeviceNumber: snapshot.DeviceNumber{Major: 195}, Class: snapshot.ClassNVIDIA, GPUMinor: ptr(0)}},
		Raw: &snapshot.Raw{
			Maps:    "55d000000000-55d000001000 r--p 00000000 08:01 1234 /usr/bin/python3.11\n" + ghostMap.Line() + "\n",
			Status:  "Name:\tpython3\nPid:\t4243\nPPid:\t1\nUid:\t1001\t1001\t1001\t1001\n",
			Cmdline: "python3\x00train.py\x00",
			Cgroup:  "0::/system.slice/docker-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope\n",
		},
	}
	miner := snapshot.Process{
		PID: 666, StartTime: 990000, Started: t0.Add(40 * time.Minute), PPID: 1, Comm: hostileComm,
		Cmdline: hostileCmdline, Exe: hostileExe, ExeDeleted: true, UID: 1001, User: "alice",
		Mappings: []snapshot.Mapping{{Address: "7f1000000000-7f1000001000", Perms: "r--s", Dev: "00:06", Inode: 812, Path: "/dev/nvidiactl", Class: snapshot.ClassNVIDIA}},
		Raw: &snapshot.Raw{
			Maps:    "7f1000000000-7f1000001000 r--s 00000000 00:06 812 /dev/nvidiactl\n",
			Status:  "Name:\t" + hostileComm + "\nPid:\t666\n",
			Cmdline: "python3\x00-c\x00x\n- forged: line\x1b]0;pwned\x07\x00",
			Cgroup:  "0::/user.slice/x\xff.scope\n", // not UTF-8: kept byte for byte
		},
	}
	before := &snapshot.Snapshot{
		ID: "20261129-100000.000000-aaaaaa", Label: snapshot.LabelBaseline, Tenant: "job-4242",
		Host: snapshot.Host{Hostname: "gpu-node-7", KernelRelease: "6.1.0-28-amd64", BootID: "b00710-1d",
			BootTime: t0.Add(-72 * time.Hour), CaptureStart: t0, CaptureEnd: t0.Add(80 * time.Millisecond), GpusnapVersion: "1.0.0"},
		Processes: []snapshot.Process{persistenced},
		NVML:      snapshot.NVML{Source: "fixture:x.json", DriverVersion: "550.54.15"},
	}
	after := &snapshot.Snapshot{
		ID: "20261129-120000.000000-bbbbbb", Label: snapshot.LabelPost, Tenant: "job-4242",
		Host: snapshot.Host{Hostname: "gpu-node-7", KernelRelease: "6.1.0-28-amd64", BootID: "b00710-1d",
			BootTime: t0.Add(-72 * time.Hour), CaptureStart: t0.Add(2 * time.Hour), CaptureEnd: t0.Add(2*time.Hour + 90*time.Millisecond), GpusnapVersion: "1.0.0"},
		Processes: []snapshot.Process{persistenced, ghost, miner},
		NVML:      snapshot.NVML{Source: "fixture:y.json", DriverVersion: "550.54.15"},
	}
	ref := func(p snapshot.Process) *diff.ProcessRef {
		return &diff.ProcessRef{PID: p.PID, StartTime: p.StartTime, Comm: p.Comm, Exe: p.Exe, ExeDeleted: p.ExeDeleted,
			Cmdline: p.Cmdline, UID: p.UID, User: p.User, ContainerID: p.ContainerID, Started: p.Started}
	}
	res := &diff.Result{
		From: before.ID, To: after.ID, Tenant: "job-4242",
		Findings: []diff.Finding{
			{Kind: diff.KindUnexpectedGPUProcess, Severity: diff.High, Summary: "666@990000 " + hostileComm + " uses a GPU; its exe is deleted and under /tmp",
				Process: ref(miner), Evidence: []string{"exe: " + hostileExe + " (deleted)", "cmdline: " + hostileCmdline[2]}},
			{Kind: diff.KindLeftoverDeviceMapping, Severity: diff.High, Summary: "4243@987654 python3 maps /dev/nvidia0 read-write",
				Process: ref(ghost), Device: "/dev/nvidia0", GPUUUID: "GPU-3f2a0000-1111-2222-3333-444455556666",
				Evidence: []string{ghostMap.Line()}, InheritedFrom: "4242@987600 (/usr/bin/python3.11)"},
			{Kind: diff.KindLeftoverDeviceHolder, Severity: diff.High, Summary: "4243@987654 python3 holds /dev/nvidia0 open rw",
				Process: ref(ghost), Device: "/dev/nvidia0", Evidence: []string{"fd 5 -> /dev/nvidia0 flags 0100002 (rw)"}},
			{Kind: diff.KindLeftoverDeviceMapping, Severity: diff.Medium, Summary: "666@990000 maps /dev/nvidiactl read-only",
				Process: ref(miner), Device: "/dev/nvidiactl", Evidence: []string{"7f1000000000-7f1000001000 r--s 00000000 00:06 812 /dev/nvidiactl"}},
		},
		Notes:   []string{"NVML was not read at FROM: library not found"},
		Summary: diff.Summary{Total: 4, BySeverity: map[string]int{"high": 3, "medium": 1}, Worst: "high"},
		MapsDiffs: map[string]string{
			"4243@987654": "--- 4243@987654 maps at 20261129-100000.000000-aaaaaa\n+++ 4243@987654 maps at 20261129-120000.000000-bbbbbb\n@@ -0,0 +1,2 @@\n+55d000000000-55d000001000 r--p 00000000 08:01 1234 /usr/bin/python3.11\n+" + ghostMap.Line() + "\n",
			"666@990000":  "--- 666@990000 maps at 20261129-100000.000000-aaaaaa\n+++ 666@990000 maps at 20261129-120000.000000-bbbbbb\n@@ -0,0 +1 @@\n+7f1000000000-7f1000001000 r--s 00000000 00:06 812 /dev/nvidiactl\n",
		},
	}
	return Input{Before: before, After: after, Result: res, Version: "1.0.0-test", UID: 0,
		TenantStart: t0.Add(20 * time.Minute), TenantEnd: t0.Add(110 * time.Minute)}
}

// testKey is a fixed key, so signed bundles are reproducible in tests too.
func testKey() ed25519.PrivateKey {
	return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))
}

func writeBundle(t *testing.T, in Input) []byte {
	t.Helper()
	var b bytes.Buffer
	if _, err := Write(&b, in); err != nil {
		t.Fatalf("Write: %v", err)
	}
	return b.Bytes()
}

type tarMember struct {
	hdr  tar.Header
	data []byte
}

func readMembers(t *testing.T, b []byte) []tarMember {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var out []tarMember
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tarMember{*hdr, data})
	}
}

// writeMembers re-packs members as another tool would after tampering.
func writeMembers(t *testing.T, ms []tarMember) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	tw := tar.NewWriter(zw)
	for _, m := range ms {
		hdr := m.hdr
		hdr.Size = int64(len(m.data))
		if err := tw.WriteHeader(&hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(m.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// memberData is the bytes of the member name (relative to the bag's directory).
func memberData(t *testing.T, b []byte, name string) []byte {
	t.Helper()
	for _, m := range readMembers(t, b) {
		if rel(m.hdr.Name) == name {
			return m.data
		}
	}
	t.Fatalf("bundle has no %s", name)
	return nil
}

func verifyBytes(t *testing.T, b []byte, pub ed25519.PublicKey) *Verification {
	t.Helper()
	rep, err := Verify(bytes.NewReader(b), pub)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	return rep
}

// rel is a member's name relative to the bag's directory.
func rel(name string) string {
	_, r, _ := strings.Cut(name, "/")
	return r
}

// named reports whether a problem names file.
func named(rep *Verification, file string) bool {
	for _, p := range rep.Problems {
		if p.Name == file {
			return true
		}
	}
	return false
}

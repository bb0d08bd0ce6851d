// Package ghostcase is the case the evidence bundle and its report pages
// are tested on, a tenant's ghost and a miner with a hostile name, as two
// snapshots and their diff. It is test data in code, shared by the bundle's
// and the renderers' tests so that both check the same case.
package ghostcase

import (
	"time"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/snapshot"
)

// HostileComm and friends are what a tenant can name its processes, with
// markup, escape sequences, a forged line and bytes that are not UTF-8.
const (
	HostileComm = "<script>alert(1)</script>"
	HostileExe  = "/tmp/.x/\x1b[31mminer\xff"
)

// HostileCmdline is a command line that forges a line, sets the terminal's
// title, holds Markdown and HTML and is not UTF-8.
var HostileCmdline = []string{"python3", "-c", "x\n- forged: line\x1b]0;pwned\x07", "`code` <img src=x onerror=alert(2)>", "bad\xfe\xffutf8"}

// T0 is the FROM capture time, and the rest of the case is placed from it.
var T0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

func ptr[T any](v T) *T { return &v }

// Case is the two snapshots, their diff and the tenant's job around them.
type Case struct {
	Before, After          *snapshot.Snapshot
	Result                 *diff.Result
	TenantStart, TenantEnd time.Time
}

// New is a tenant's ghost, a forked child still mapping /dev/nvidia0
// read-write after its parent exited, a renamed miner from /tmp with a
// hostile name, and nvidia-persistenced unchanged at both ends.
func New() Case {
	persistenced := snapshot.Process{
		PID: 1200, StartTime: 500, Started: T0.Add(-48 * time.Hour), PPID: 1, Comm: "nvidia-persiste",
		Exe: "/usr/bin/nvidia-persistenced", UID: 0, User: "root",
		Holders: []snapshot.Holder{{FD: 3, Target: "/dev/nvidiactl", Access: "rw", Class: snapshot.ClassNVIDIA}},
	}
	ghostMap := snapshot.Mapping{Address: "7f0000000000-7f0000200000", Start: 0x7f0000000000, End: 0x7f0000200000, Size: 0x200000,
		Perms: "rw-s", Dev: "00:06", Inode: 811, Path: "/dev/nvidia0", DeviceNumber: snapshot.DeviceNumber{Major: 195}, DeviceType: "char",
		Class: snapshot.ClassNVIDIA, GPUMinor: ptr(0)}
	ghost := snapshot.Process{
		PID: 4243, StartTime: 987654, Started: T0.Add(30 * time.Minute), PPID: 1, Comm: "python3",
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
		PID: 666, StartTime: 990000, Started: T0.Add(40 * time.Minute), PPID: 1, Comm: HostileComm,
		Cmdline: HostileCmdline, Exe: HostileExe, ExeDeleted: true, UID: 1001, User: "alice",
		Mappings: []snapshot.Mapping{{Address: "7f1000000000-7f1000001000", Perms: "r--s", Dev: "00:06", Inode: 812, Path: "/dev/nvidiactl", Class: snapshot.ClassNVIDIA}},
		Raw: &snapshot.Raw{
			Maps:    "7f1000000000-7f1000001000 r--s 00000000 00:06 812 /dev/nvidiactl\n",
			Status:  "Name:\t" + HostileComm + "\nPid:\t666\n",
			Cmdline: "python3\x00-c\x00x\n- forged: line\x1b]0;pwned\x07\x00",
			Cgroup:  "0::/user.slice/x\xff.scope\n", // not UTF-8, and kept byte for byte
		},
	}
	before := &snapshot.Snapshot{
		ID: "20261129-100000.000000-aaaaaa", Label: snapshot.LabelBaseline, Tenant: "job-4242",
		Host: snapshot.Host{Hostname: "gpu-node-7", KernelRelease: "6.1.0-28-amd64", BootID: "b00710-1d",
			BootTime: T0.Add(-72 * time.Hour), CaptureStart: T0, CaptureEnd: T0.Add(80 * time.Millisecond), GpusnapVersion: "1.0.0"},
		Processes: []snapshot.Process{persistenced},
		NVML:      snapshot.NVML{Source: "fixture:x.json", DriverVersion: "550.54.15"},
	}
	after := &snapshot.Snapshot{
		ID: "20261129-120000.000000-bbbbbb", Label: snapshot.LabelPost, Tenant: "job-4242",
		Host: snapshot.Host{Hostname: "gpu-node-7", KernelRelease: "6.1.0-28-amd64", BootID: "b00710-1d",
			BootTime: T0.Add(-72 * time.Hour), CaptureStart: T0.Add(2 * time.Hour), CaptureEnd: T0.Add(2*time.Hour + 90*time.Millisecond), GpusnapVersion: "1.0.0"},
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
			{Kind: diff.KindUnexpectedGPUProcess, Severity: diff.High, Summary: "666@990000 " + HostileComm + " uses a GPU; its exe is deleted and under /tmp",
				Process: ref(miner), Evidence: []string{"exe: " + HostileExe + " (deleted)", "cmdline: " + HostileCmdline[2]}},
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
	return Case{Before: before, After: after, Result: res,
		TenantStart: T0.Add(20 * time.Minute), TenantEnd: T0.Add(110 * time.Minute)}
}

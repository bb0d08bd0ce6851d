package diff

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/snapshot"
)

// Hand-built snapshots for the rules' tests.

type procOpt func(*snapshot.Process)

func proc(pid int, start uint64, comm, exe string, opts ...procOpt) snapshot.Process {
	p := snapshot.Process{PID: pid, StartTime: start, PPID: 1, Comm: comm, Exe: exe, UID: 1000, User: "bob",
		Cmdline: []string{exe}}
	for _, o := range opts {
		o(&p)
	}
	return p
}

// class is the class and GPU capture records for a device at p, from the one
// classifier (snapshot.DeviceClasses.Classify). devno is "" when stat could
// not be read, else a character device "MAJ:MIN".
func class(p, devno string) (string, *int) {
	var kind snapshot.FileKind
	maj, mnr, known := strings.Cut(devno, ":")
	if known {
		a, err1 := strconv.ParseUint(maj, 10, 32)
		b, err2 := strconv.ParseUint(mnr, 10, 32)
		if err1 != nil || err2 != nil {
			panic("bad device number " + devno)
		}
		kind = snapshot.FileKind{Device: true, Char: true, Major: uint32(a), Minor: uint32(b)}
	}
	return snapshot.DeviceClasses{}.Classify(p, kind, known)
}

// deviceNumber reads a test's "MAJ:MIN" ("" for unknown).
func deviceNumber(devno string) snapshot.DeviceNumber {
	var d snapshot.DeviceNumber
	if err := d.UnmarshalText([]byte(devno)); err != nil {
		panic(err)
	}
	return d
}

// mapping adds a device mapping, devno "" when capture could not stat it.
func mapping(p, perms string, start, size, offset uint64, devno string) procOpt {
	return func(pr *snapshot.Process) {
		m := snapshot.Mapping{
			Address: strconv.FormatUint(start, 16) + "-" + strconv.FormatUint(start+size, 16),
			Start:   start, End: start + size, Size: size, Perms: perms, Offset: offset,
			Dev: "00:05", Inode: 1000, Path: p, DeviceNumber: deviceNumber(devno),
		}
		m.Class, m.GPUMinor = class(p, devno)
		if devno != "" {
			m.DeviceType = "char"
		}
		pr.Mappings = append(pr.Mappings, m)
	}
}

func holder(fd int, target, access, devno string) procOpt {
	return func(pr *snapshot.Process) {
		h := snapshot.Holder{FD: fd, Target: target, Access: access, DeviceNumber: deviceNumber(devno)}
		h.Class, h.GPUMinor = class(target, devno)
		if devno != "" {
			h.DeviceType = "char"
		}
		pr.Holders = append(pr.Holders, h)
	}
}

func cgroups(lines ...string) procOpt {
	return func(pr *snapshot.Process) { pr.Cgroups = lines }
}

func rawMapsText(text string) procOpt {
	return func(pr *snapshot.Process) { pr.Raw = &snapshot.Raw{Maps: text} }
}

var t0 = time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC)

func snap(id string, procs ...snapshot.Process) *snapshot.Snapshot {
	s := &snapshot.Snapshot{ID: id, Label: snapshot.LabelSnapshot, Processes: procs}
	s.Host.BootID = "boot-1"
	s.Host.Hostname = "gpu-node-1"
	s.Host.CaptureStart = t0
	s.NVML = snapshot.NVML{Source: "fixture:test"}
	return s
}

func u64(n uint64) *uint64 { return &n }
func u32(n uint32) *uint32 { return &n }
func intp(n int) *int      { return &n }

// gpu is GPU 0 (minor 0) with used memory and compute processes (pid, bytes).
func gpu(used uint64, procs ...snapshot.GPUProcess) snapshot.GPU {
	return snapshot.GPU{Index: 0, UUID: "GPU-0", MinorNumber: intp(0),
		Memory:           &snapshot.Memory{Total: 80 << 30, Used: used, Free: 80<<30 - used},
		ComputeProcesses: procs}
}

func gp(pid int, mem uint64) snapshot.GPUProcess {
	return snapshot.GPUProcess{PID: pid, UsedGPUMemory: u64(mem)}
}

func withGPUs(s *snapshot.Snapshot, gpus ...snapshot.GPU) *snapshot.Snapshot {
	s.NVML.Devices = gpus
	return s
}

// got is what a test compares, "kind severity pid device" per finding, in order.
func got(r *Result) []string {
	var out []string
	for _, f := range r.Findings {
		pid := 0
		if f.Process != nil {
			pid = f.Process.PID
		}
		line := f.Kind + " " + f.Severity.String() + " " + strconv.Itoa(pid)
		if f.Device != "" {
			line += " " + f.Device
		}
		out = append(out, line)
	}
	return out
}

// expect stops the test when the findings are not want, so the test may
// index them afterwards.
func expect(t *testing.T, r *Result, want ...string) {
	t.Helper()
	g := got(r)
	if strings.Join(g, "\n") != strings.Join(want, "\n") {
		t.Fatalf("findings:\n  %s\nwant:\n  %s\nresult: %+v", strings.Join(g, "\n  "), strings.Join(want, "\n  "), r.Findings)
	}
}

func compare(from, to *snapshot.Snapshot) *Result {
	return Compare(from, to, Options{ZombieThreshold: DefaultZombieThreshold})
}

// first is the first finding, stopping the test when there is none.
func first(t *testing.T, r *Result) Finding {
	t.Helper()
	if len(r.Findings) == 0 {
		t.Fatal("no finding")
	}
	return r.Findings[0]
}

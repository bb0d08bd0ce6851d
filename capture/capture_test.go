package capture

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/capture/procfs"
	"github.com/gpusnap/gpusnap/snapshot"
)

const fixtureRoot = "../fixtures/proc/gpuhost"

func captureFixture(t *testing.T, root string, faults func(string) error) *snapshot.Snapshot {
	t.Helper()
	s, err := capture(context.Background(), Options{ProcRoot: root}, faults)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func findPID(t *testing.T, s *snapshot.Snapshot, pid int) *snapshot.Process {
	t.Helper()
	for i := range s.Processes {
		if s.Processes[i].PID == pid {
			return &s.Processes[i]
		}
	}
	t.Fatalf("pid %d not in the snapshot", pid)
	return nil
}

func TestCaptureFixtureHost(t *testing.T) {
	s := captureFixture(t, fixtureRoot, nil)
	h := s.Host
	if h.Hostname != "gpu-node-17" || h.KernelRelease != "6.8.0-45-generic" || h.BootID != "0f8e2a3c-61d4-4c1e-9a57-2b5e8f1d7c90" {
		t.Errorf("host facts from the fixture root: %+v", h)
	}
	if !h.BootTime.Equal(time.Unix(1764400000, 0)) {
		t.Errorf("boot time %v, want btime 1764400000", h.BootTime)
	}
	if h.ProcRoot != fixtureRoot || h.GpusnapVersion != Version || h.CaptureEnd.Before(h.CaptureStart) {
		t.Errorf("capture facts: %+v", h)
	}
	if len(s.Scan.Errors) != 0 {
		t.Errorf("scan errors on a complete fixture: %v", s.Scan.Errors)
	}
	if s.Scan.ProcessesRead != 10 || s.Scan.ProcessesRead != len(s.Processes) {
		t.Errorf("processes read %d (%d kept), want 10", s.Scan.ProcessesRead, len(s.Processes))
	}
	// 8000 is listed but its files are gone: vanished between listing and reading.
	if s.Scan.Vanished != 1 || !slices.Equal(s.Scan.VanishedPIDs, []int{8000}) {
		t.Errorf("vanished %d %v, want 1 [8000]", s.Scan.Vanished, s.Scan.VanishedPIDs)
	}
	if s.Scan.Refused != 0 {
		t.Errorf("refused %v on a readable fixture", s.Scan.RefusedPIDs)
	}
}

func TestCaptureFixtureIdentity(t *testing.T) {
	s := captureFixture(t, fixtureRoot, nil)

	p := findPID(t, s, 4242)
	if p.StartTime != 250000 || p.PPID != 1 || p.Comm != "python3" || p.Key() != "4242@250000" {
		t.Errorf("identity: %+v", p)
	}
	if want := time.Unix(1764400000, 0).Add(2500 * time.Second); !p.Started.Equal(want) {
		t.Errorf("started %v, want %v", p.Started, want)
	}
	if !slices.Equal(p.Cmdline, []string{"python3", "train.py", "--data", "/data/my set"}) {
		t.Errorf("cmdline %q", p.Cmdline)
	}
	if p.Exe != "/usr/bin/python3.11" || p.ExeDeleted {
		t.Errorf("exe %q deleted=%v", p.Exe, p.ExeDeleted)
	}
	if p.UID != 1000 || p.EUID != 1000 || !slices.Equal(p.NSpid, []int{4242, 1}) || p.PIDNamespace != "pid:[4026532511]" {
		t.Errorf("uid %d euid %d nspid %v ns %q", p.UID, p.EUID, p.NSpid, p.PIDNamespace)
	}
	if p.ContainerID != strings.Repeat("3f2a9c1e", 8) || p.ContainerRuntime != "docker" {
		t.Errorf("container %q %q", p.ContainerID, p.ContainerRuntime)
	}
	if p.KernelThread || len(p.Errors) != 0 {
		t.Errorf("kernel thread %v, errors %v", p.KernelThread, p.Errors)
	}

	// The miner: hostile comm and cmdline kept (control bytes as they are,
	// each invalid UTF-8 byte as U+FFFD, as JSON stores it), deleted exe, setuid root.
	m := findPID(t, s, 5000)
	if m.Comm != "python3\n\x1b[31mFAKE" {
		t.Errorf("comm %q", m.Comm)
	}
	if len(m.Cmdline) != 5 || m.Cmdline[3] != "\x1b]0;pwned\a" || m.Cmdline[4] != "\ufffd\ufffd bad" {
		t.Errorf("cmdline %q", m.Cmdline)
	}
	if m.Exe != "/tmp/.x/miner" || !m.ExeDeleted {
		t.Errorf("exe %q deleted=%v", m.Exe, m.ExeDeleted)
	}
	if m.UID != 1001 || m.EUID != 0 {
		t.Errorf("uid %d euid %d, want 1001 0", m.UID, m.EUID)
	}
	if m.PodUID != "1a2b3c4d-5e6f-7a8b-9c0d-112233445566" || m.ContainerRuntime != "containerd" || m.ContainerID != strings.Repeat("c0ffee00", 8) {
		t.Errorf("pod %q runtime %q container %q", m.PodUID, m.ContainerRuntime, m.ContainerID)
	}

	k := findPID(t, s, 2)
	if !k.KernelThread || k.Exe != "" || k.Cmdline != nil || len(k.Errors) != 0 || k.UID != 0 {
		t.Errorf("kthreadd: %+v", k)
	}
	if p := findPID(t, s, 1); p.KernelThread || p.UID != 0 || p.SystemdUnit != "init.scope" {
		t.Errorf("init: %+v", p)
	}
	// The fixture's uids are another machine's: this host's user database
	// (which has root for 0, at least) names none of them.
	for _, p := range s.Processes {
		if p.User != "" {
			t.Errorf("pid %d uid %d named %q from this host's user database", p.PID, p.UID, p.User)
		}
	}
	for pid, want := range map[int]procfs.Attribution{
		6000: {SlurmJobID: "4242"},
		6100: {SlurmJobID: "4243", SystemdUnit: "slurmstepd.scope"},
		7000: {ContainerID: strings.Repeat("0123abcd", 8), Runtime: "cri-o", PodUID: "9f8e7d6c-5b4a-3928-1706-f5e4d3c2b1a0", SystemdUnit: "crio-" + strings.Repeat("0123abcd", 8) + ".scope"},
		7100: {ContainerID: strings.Repeat("fedcba98", 8), PodUID: "11111111-2222-3333-4444-555555555555"},
		7200: {ContainerID: strings.Repeat("ab12cd34", 8), Runtime: "docker"},
		7300: {SystemdUnit: "ssh.service"},
	} {
		p := findPID(t, s, pid)
		got := procfs.Attribution{ContainerID: p.ContainerID, Runtime: p.ContainerRuntime, PodUID: p.PodUID, SlurmJobID: p.SlurmJobID, SystemdUnit: p.SystemdUnit}
		if got != want {
			t.Errorf("pid %d procfs.Attribution %+v, want %+v", pid, got, want)
		}
	}
}

func TestCaptureFixtureDevices(t *testing.T) {
	s := captureFixture(t, fixtureRoot, nil)
	p := findPID(t, s, 4242)
	var got []string
	for _, m := range p.Mappings {
		minor := "-"
		if m.GPUMinor != nil {
			minor = fmt.Sprint(*m.GPUMinor)
		}
		got = append(got, fmt.Sprintf("%s %s %s %d %s gpu=%s", m.Path, m.Perms, m.Class, m.Size, m.Address, minor))
	}
	// NVIDIA first, then other devices; /dev/zero (deleted) rw-s and /dev/shm are not devices.
	want := []string{
		"/dev/nvidiactl rw-s nvidia 2097152 7f1000000000-7f1000200000 gpu=-",
		"/dev/nvidia0 rw-s nvidia 2097152 7f1000200000-7f1000400000 gpu=0",
		"/dev/nvidia0 r--s nvidia 2097152 7f1000400000-7f1000600000 gpu=0",
		"/dev/nvidia-uvm rw-s nvidia 2097152 7f1000600000-7f1000800000 gpu=-",
		"/dev/dri/renderD128 rw-s other 1048576 7f1000a00000-7f1000b00000 gpu=-",
	}
	if !slices.Equal(got, want) {
		t.Errorf("mappings of 4242:\n got %q\nwant %q", got, want)
	}
	if m := p.Mappings[2]; m.Offset != 0x200000 || m.Dev != "00:05" || m.Inode != 1051 || m.Start != 0x7f1000400000 || m.End != 0x7f1000600000 {
		t.Errorf("fields of a mapping: %+v", m)
	}
	if len(p.SuspectAnon) != 1 || p.SuspectAnon[0].Size != 128<<20 || p.SuspectAnon[0].Class != snapshot.ClassAnonExec || p.SuspectAnon[0].Perms != "rwxp" {
		t.Errorf("suspect anon mappings: %+v", p.SuspectAnon)
	}
	var holders []string
	for _, h := range p.Holders {
		holders = append(holders, fmt.Sprintf("%d %s %s %s %s", h.FD, h.Target, h.Access, h.Flags, h.Class))
	}
	wantH := []string{
		"3 /dev/nvidiactl rw 0102002 nvidia",
		"4 /dev/nvidia0 rw 0102002 nvidia",
		"5 /dev/nvidia-uvm rw 0102002 nvidia",
		"7 /dev/nvidia0 r 0100000 nvidia",
		"0 /dev/null   other",
	}
	if !slices.Equal(holders, wantH) {
		t.Errorf("holders of 4242:\n got %q\nwant %q", holders, wantH)
	}
	if p.Raw == nil || !strings.Contains(p.Raw.Maps, "/opt/my models/lib cuda.so (deleted)") ||
		!strings.Contains(p.Raw.Status, "NSpid:\t4242\t1") || p.Raw.Cmdline != "python3\x00train.py\x00--data\x00/data/my set\x00" ||
		!strings.HasPrefix(p.Raw.Cgroup, "0::/system.slice/docker-") {
		t.Errorf("raw text of an NVIDIA user: %+v", p.Raw)
	}

	// The miner: malformed lines are per-process errors, the good lines still count.
	m := findPID(t, s, 5000)
	if len(m.Mappings) != 1 || m.Mappings[0].Path != "/dev/nvidia1" || *m.Mappings[0].GPUMinor != 1 || !m.Mappings[0].Writable() {
		t.Errorf("miner mappings %+v", m.Mappings)
	}
	wantErr := []string{"maps line 2: ", "maps line 3: ", "maps line 4: "}
	if len(m.Errors) != len(wantErr) {
		t.Fatalf("miner errors %q, want 3 malformed maps lines", m.Errors)
	}
	for i, e := range m.Errors {
		if !strings.HasPrefix(e, wantErr[i]) || !strings.Contains(e, "malformed maps line") {
			t.Errorf("error %d = %q", i, e)
		}
	}
	if len(m.Holders) != 3 || m.Holders[2].Target != "/dev/nvidia1" || !m.Holders[2].Deleted || m.Holders[2].Access != "rw" || m.Holders[1].Access != "w" {
		t.Errorf("miner holders %+v", m.Holders)
	}

	// A Slurm task: a node in a container rootfs's dev dir, with spaces and
	// deleted, is GPU 3 by its name; a DRM node is another device.
	j := findPID(t, s, 6000)
	if len(j.Mappings) != 2 || j.Mappings[0].Path != "/srv/ctr 2/rootfs/dev/nvidia3" || !j.Mappings[0].Deleted ||
		*j.Mappings[0].GPUMinor != 3 || j.Mappings[1].Class != snapshot.ClassOther || j.Mappings[0].Line() != "7f3000200000-7f3000400000 rw-p 00000000 00:05 4001 /srv/ctr 2/rootfs/dev/nvidia3 (deleted)" {
		t.Errorf("slurm task mappings %+v", j.Mappings)
	}
	if j.Raw == nil {
		t.Error("no raw text for a process mapping /srv/ctr 2/rootfs/dev/nvidia3")
	}

	// Processes that use no NVIDIA device keep no raw text and no suspect mappings.
	for _, p := range s.Processes {
		if !p.UsesNVIDIA() && (p.Raw != nil || p.SuspectAnon != nil) {
			t.Errorf("pid %d uses no NVIDIA device but keeps raw=%v anon=%v", p.PID, p.Raw != nil, p.SuspectAnon)
		}
	}
}

// TestCaptureRefused simulates what PID 1 does on a real host, where maps,
// exe, ns/pid and the fd links refuse even root (EACCES). Root ignores file
// modes, so the fixture cannot express that: the test hook returns the error
// the kernel would.
func TestCaptureRefused(t *testing.T) {
	refuse := map[string]bool{"maps": true, "exe": true, "fd": true, "ns/pid": true}
	faults := func(path string) error {
		rest, ok := strings.CutPrefix(path, fixtureRoot+"/1/")
		if ok && refuse[rest] {
			return syscall.EACCES
		}
		return nil
	}
	s := captureFixture(t, fixtureRoot, faults)
	if s.Scan.Refused != 1 || !slices.Equal(s.Scan.RefusedPIDs, []int{1}) {
		t.Errorf("refused %d %v, want 1 [1]", s.Scan.Refused, s.Scan.RefusedPIDs)
	}
	p := findPID(t, s, 1)
	// Who the process runs as (status, ns/pid) is read once its fds are.
	want := []string{"exe: permission denied", "maps: permission denied", "fd: permission denied", "ns/pid: permission denied"}
	if !slices.Equal(p.Errors, want) {
		t.Errorf("errors %q, want %q", p.Errors, want)
	}
	if p.Comm != "systemd" || p.StartTime != 1 || p.UID != 0 || p.Holders != nil {
		t.Errorf("what could be read of PID 1: %+v", p)
	}
}

// TestCaptureMissingFiles: any file may be missing from a proc root; what is
// missing is recorded per process, and the rest is read.
func TestCaptureMissingFiles(t *testing.T) {
	root := t.TempDir()
	pid := filepath.Join(root, "300")
	must(t, os.MkdirAll(pid, 0o755))
	must(t, os.WriteFile(filepath.Join(pid, "stat"), []byte("300 (lonely) S 1 300 300 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 777 0 0\n"), 0o644))
	must(t, os.Mkdir(filepath.Join(pid, "status"), 0o755)) // a directory where a file belongs
	s := captureFixture(t, root, nil)
	p := findPID(t, s, 300)
	if p.Comm != "lonely" || p.StartTime != 777 {
		t.Errorf("stat not read: %+v", p)
	}
	for _, want := range []string{"status: is a directory, not a regular file (not read)", "cmdline: no such file or directory", "maps: no such file or directory", "fd: no such file or directory"} {
		if !slices.Contains(p.Errors, want) {
			t.Errorf("errors %q lack %q", p.Errors, want)
		}
	}
	if s.Scan.Vanished != 0 || s.Scan.Refused != 0 {
		t.Errorf("scan %+v: a missing file is neither vanished nor refused", s.Scan)
	}
	wantScan := []string{"boot time: ", "hostname: ", "kernel release: ", "boot id: ", "devices: "}
	if len(s.Scan.Errors) != len(wantScan) {
		t.Fatalf("scan errors %q, want one per missing host file", s.Scan.Errors)
	}
	for i, e := range s.Scan.Errors {
		if !strings.HasPrefix(e, wantScan[i]) {
			t.Errorf("scan error %d = %q, want %q...", i, e, wantScan[i])
		}
	}
	if !s.Host.BootTime.IsZero() || !p.Started.IsZero() || s.Host.Hostname != "" {
		t.Errorf("facts of another machine leaked into a fixture capture: %+v", s.Host)
	}
}

func TestCaptureBadRoot(t *testing.T) {
	_, err := Capture(context.Background(), Options{ProcRoot: filepath.Join(t.TempDir(), "nope")})
	if err == nil || !strings.Contains(err.Error(), "no such file or directory") {
		t.Errorf("err = %v, want a clear error for a missing proc root", err)
	}
}

func TestCaptureCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Capture(ctx, Options{ProcRoot: fixtureRoot}); err != context.Canceled {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}

// TestCaptureBigMaps: a 50,000-line maps file, with device lines spread
// through it, is read whole and every device line found.
func TestCaptureBigMaps(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "77")
	must(t, os.MkdirAll(filepath.Join(dir, "fd"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "stat"), []byte("77 (big) S 1 77 77 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 99 0 0\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "status"), []byte("Uid:\t0\t0\t0\t0\nNSpid:\t77\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "cmdline"), []byte("big\x00"), 0o644))
	var b strings.Builder
	for i := range 50000 {
		path := fmt.Sprintf("/usr/lib/lib%d.so", i%500)
		if i%5000 == 4999 {
			path = fmt.Sprintf("/dev/nvidia%d", i/5000)
		}
		fmt.Fprintf(&b, "%x-%x r--s 00000000 fd:01 %d %s\n", 0x10000000+i*0x1000, 0x10001000+i*0x1000, i, path)
	}
	must(t, os.WriteFile(filepath.Join(dir, "maps"), []byte(b.String()), 0o644))
	s := captureFixture(t, root, nil)
	p := findPID(t, s, 77)
	if len(p.Mappings) != 10 {
		t.Fatalf("%d device mappings, want 10", len(p.Mappings))
	}
	for i, m := range p.Mappings {
		if m.GPUMinor == nil || *m.GPUMinor != i || m.Inode != uint64(i*5000+4999) {
			t.Errorf("mapping %d: %+v", i, m)
		}
	}
	// The raw text keeps its first TextLimit bytes and names the whole.
	sum := sha256.Sum256([]byte(b.String()))
	if p.Raw == nil || p.Raw.Maps != b.String()[:snapshot.TextLimit] ||
		p.Raw.Cuts["maps"] != (snapshot.Cut{Length: int64(b.Len()), SHA256: hex.EncodeToString(sum[:])}) {
		t.Error("raw maps text is not the first 64 KiB of the 50,000-line file, named by its length and SHA-256")
	}
}

// TestCaptureLiveProc captures this machine's own /proc.
func TestCaptureLiveProc(t *testing.T) {
	s, err := Capture(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Host.ProcRoot != "/proc" || s.Host.BootTime.IsZero() || s.Host.KernelRelease == "" || s.Host.BootID == "" {
		t.Errorf("host facts of this machine: %+v (errors %q)", s.Host, s.Scan.Errors)
	}
	if s.Scan.ProcessesRead < 2 || s.Scan.ProcessesRead != len(s.Processes) {
		t.Errorf("processes read %d, kept %d", s.Scan.ProcessesRead, len(s.Processes))
	}
	if !slices.IsSortedFunc(s.Processes, func(a, b snapshot.Process) int { return a.PID - b.PID }) {
		t.Error("processes not in PID order")
	}
	me := findPID(t, s, os.Getpid())
	exe, _ := os.Executable()
	if me.Exe != exe || !slices.Equal(me.Cmdline, os.Args) || me.UID != os.Getuid() || me.EUID != os.Geteuid() || me.PPID != os.Getppid() {
		t.Errorf("this test process as captured: exe %q cmdline %q uid %d euid %d ppid %d", me.Exe, me.Cmdline, me.UID, me.EUID, me.PPID)
	}
	if me.StartTime == 0 || me.Started.Before(s.Host.BootTime) || me.Started.After(s.Host.CaptureStart) || len(me.NSpid) == 0 || me.NSpid[0] != os.Getpid() {
		t.Errorf("identity: start %d (%v) nspid %v", me.StartTime, me.Started, me.NSpid)
	}
	// PID 1 is kept whether or not it refused reads; a refusal is counted, never an error.
	init := findPID(t, s, 1)
	refused := slices.Contains(s.Scan.RefusedPIDs, 1)
	hasDenied := slices.ContainsFunc(init.Errors, func(e string) bool { return strings.HasSuffix(e, "permission denied") })
	if refused != hasDenied {
		t.Errorf("PID 1 refused=%v but errors %q", refused, init.Errors)
	}
	if s.Scan.Refused != len(s.Scan.RefusedPIDs) || s.Scan.Vanished != len(s.Scan.VanishedPIDs) {
		t.Errorf("scan counts disagree with their PID lists: %+v", s.Scan)
	}
	if os.Geteuid() == 0 {
		// As root, this process's own fds are readable and /dev/null (if held) has its number.
		for _, h := range me.Holders {
			if h.Target == "/dev/null" && (h.DeviceNumber.String() != "1:3" || h.DeviceType != "char") {
				t.Errorf("holder of /dev/null: %+v", h)
			}
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestCaptureLongUptime: start times of a host up for years do not overflow.
func TestCaptureLongUptime(t *testing.T) {
	root := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(root, "5"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "stat"), []byte("cpu  1 0 1 1 0 0 0 0 0 0\nbtime 1000000000\n"), 0o644))
	// 10^10 ticks: 3.2 years after boot.
	must(t, os.WriteFile(filepath.Join(root, "5", "stat"), []byte("5 (old) S 1 5 5 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 10000000000 0 0\n"), 0o644))
	s := captureFixture(t, root, nil)
	p := findPID(t, s, 5)
	if want := time.Unix(1000000000+100000000, 0); !p.Started.Equal(want) {
		t.Errorf("started %v, want %v", p.Started, want)
	}
}

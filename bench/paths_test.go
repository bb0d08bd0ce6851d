package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/bench/floor"
	"github.com/gpusnap/gpusnap/bpf"
	"github.com/gpusnap/gpusnap/capture"
	"github.com/gpusnap/gpusnap/snapshot"
)

// The two capture paths against the raw floor, in one interleaved run:
//
//	sudo go test -run x -bench 'Paths|HeavyProcess' -benchtime 10x ./bench/
//
// BenchmarkPaths starts sleeps until the host has at least 600, 2,000 and
// 5,000 processes; BenchmarkHeavyProcess adds one process with 100,000
// mappings and 20,000 fds on /dev/null. Each reports CPU (user+system, this
// process's, the kernel's work for it included) and wall time per capture,
// and the ratios: bpf/floor-cpu is the BPF path's target (<= 0.4x), over all
// rounds, with -median, -min and -max of the rounds' own ratios, which a
// shared host's load moves less; bpf/proc is the heavy process's (<= 0.1x).
// The BPF path reads its iterators from pins on a private BPF filesystem, as
// on a host where systemd mounts /sys/fs/bpf; bpf-load is a capture that
// loads them first (the first capture after boot or upgrade).

// cpuNow is this process's CPU time so far, all threads, kernel included.
func cpuNow() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cost is the CPU and wall time of runs of one contender.
type cost struct{ cpu, wall time.Duration }

func (c *cost) time(fn func()) {
	c0, t0 := cpuNow(), time.Now()
	fn()
	c.cpu += cpuNow() - c0
	c.wall += time.Since(t0)
}

// pinOnPrivateBPFFS points bpf.PinRoot at a BPF filesystem mounted for the
// benchmark; it skips without root.
func pinOnPrivateBPFFS(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("the BPF path needs root")
	}
	dir := b.TempDir()
	if err := syscall.Mount("bpf", dir, "bpf", 0, "mode=0700"); err != nil {
		b.Skipf("mount a BPF filesystem: %v", err)
	}
	b.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	old := bpf.PinRoot
	bpf.PinRoot = dir + "/gpusnap"
	b.Cleanup(func() { bpf.PinRoot = old })
}

// startSleepers starts n sleep processes and kills them, by PID, at cleanup.
// Each child's handle (a pidfd) is released as it starts. Held, the
// benchmark would hold one fd per sleep, and each later sleep would inherit
// a fd table as large (thousands of slots for three fds) that every walk of
// its fds, the floor's and the captures' alike, scans to its end.
func startSleepers(b *testing.B, n int) {
	var pids []int
	b.Cleanup(func() {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			_, _ = syscall.Wait4(pid, nil, 0, nil)
		}
	})
	for range n {
		c := exec.Command("sleep", "3600")
		if err := c.Start(); err != nil {
			b.Fatalf("start sleep %d of %d: %v", len(pids)+1, n, err)
		}
		pids = append(pids, c.Process.Pid)
		if err := c.Process.Release(); err != nil {
			b.Fatal(err)
		}
	}
}

func capturePath(b *testing.B, path string) *snapshot.Snapshot {
	s, err := capture.Capture(context.Background(), capture.Options{Path: path})
	if err != nil {
		b.Fatal(err)
	}
	if s.Scan.CapturePath != path {
		b.Fatalf("asked for %s, took %s (%s)", path, s.Scan.CapturePath, s.Scan.CaptureNote)
	}
	return s
}

func BenchmarkPaths(b *testing.B) {
	pinOnPrivateBPFFS(b)
	for _, n := range []int{600, 2000, 5000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			if extra := n - countProcesses(b); extra > 0 {
				startSleepers(b, extra)
			}
			comparePaths(b, true)
		})
	}
}

// comparePaths alternates the floor, the /proc capture and the BPF capture.
func comparePaths(b *testing.B, withFloor bool) {
	w := floor.NewWalker()
	var fl, proc, bp, load cost
	capturePath(b, capture.PathBPF) // load and pin
	procs, gpuUsers := 0, 0
	var ratios []float64 // bpf/floor CPU of each round
	for b.Loop() {
		var round [2]cost
		if withFloor {
			round[0].time(func() { walk(b, w) })
		}
		proc.time(func() { procs = capturePath(b, capture.PathProc).Scan.ProcessesRead })
		round[1].time(func() { gpuUsers = countGPUUsers(capturePath(b, capture.PathBPF)) })
		fl, bp = fl.plus(round[0]), bp.plus(round[1])
		if withFloor {
			ratios = append(ratios, float64(round[1].cpu)/float64(round[0].cpu))
		}
	}
	// One capture that loads the iterators, as the first after boot does.
	old := bpf.PinRoot
	bpf.PinRoot = "/nonexistent/gpusnap"
	load.time(func() { capturePath(b, capture.PathBPF) })
	bpf.PinRoot = old

	n := float64(b.N)
	ms := func(d time.Duration) float64 { return float64(d) / n / 1e6 }
	b.ReportMetric(float64(procs), "procs")
	b.ReportMetric(float64(gpuUsers), "gpu-users")
	b.ReportMetric(ms(proc.cpu), "proc-cpu-ms")
	b.ReportMetric(ms(bp.cpu), "bpf-cpu-ms")
	b.ReportMetric(ms(bp.wall), "bpf-wall-ms")
	b.ReportMetric(ms(proc.wall), "proc-wall-ms")
	b.ReportMetric(float64(load.cpu)/1e6, "bpf-load-cpu-ms")
	b.ReportMetric(float64(bp.cpu)/float64(proc.cpu), "bpf/proc-cpu")
	b.ReportMetric(float64(bp.wall)/float64(proc.wall), "bpf/proc-wall")
	if withFloor {
		b.ReportMetric(ms(fl.cpu), "floor-cpu-ms")
		b.ReportMetric(float64(bp.cpu)/float64(fl.cpu), "bpf/floor-cpu")
		b.ReportMetric(float64(bp.wall)/float64(fl.wall), "bpf/floor-wall")
		b.ReportMetric(float64(proc.cpu)/float64(fl.cpu), "proc/floor-cpu")
		b.ReportMetric(median(ratios), "bpf/floor-cpu-median")
		b.ReportMetric(slices.Min(ratios), "bpf/floor-cpu-min")
		b.ReportMetric(slices.Max(ratios), "bpf/floor-cpu-max")
	}
}

// countGPUUsers is how many processes of s use an NVIDIA device: each costs
// both capture paths the reads of triage's evidence (sockets, lineage, its
// binary's hash), which the floor does not make. On a shared host another
// test's made-up GPU user adds them to the figures.
func countGPUUsers(s *snapshot.Snapshot) int {
	n := 0
	for i := range s.Processes {
		if s.Processes[i].UsesNVIDIA() {
			n++
		}
	}
	return n
}

// BenchmarkHeavyProcess: one process with 100,000 mappings (a file mapped
// page by page, as a big program's many small mappings) and 20,000 fds on
// /dev/null (fewer where RLIMIT_NOFILE's hard limit is lower: heavy-fds says
// how many). vm.max_map_count is raised for it and restored.
func BenchmarkHeavyProcess(b *testing.B) {
	pinOnPrivateBPFFS(b)
	const maxMapCount = "/proc/sys/vm/max_map_count"
	old, err := os.ReadFile(maxMapCount)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(maxMapCount, []byte("200000"), 0o644); err != nil {
		b.Skipf("raise vm.max_map_count: %v", err)
	}
	b.Cleanup(func() { _ = os.WriteFile(maxMapCount, old, 0o644) })

	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), heavyProcessEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	ready := make([]byte, 6)
	if n, err := out.Read(ready); err != nil || string(ready[:n]) != "ready\n" {
		b.Fatalf("heavy helper: %q, %v", ready[:n], err)
	}
	comparePaths(b, false)
	heavy := capturePath(b, capture.PathBPF)
	for _, p := range heavy.Processes {
		if p.PID == cmd.Process.Pid {
			b.ReportMetric(float64(len(p.Holders)), "heavy-fds")
		}
	}
}

// heavyProcessEnv, set to 1, makes the test binary the heavy process of
// BenchmarkHeavyProcess (TestMain).
const heavyProcessEnv = "GPUSNAP_HEAVY_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(heavyProcessEnv) == "1" {
		if err := heavyProcess(); err != nil {
			fmt.Fprintln(os.Stderr, "heavy process:", err)
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}

// heavyProcess maps one file 100,000 times and holds 20,000 fds, says
// "ready" on stdout and sleeps until killed.
func heavyProcess() error {
	f, err := os.CreateTemp("", "heavy")
	if err != nil {
		return err
	}
	os.Remove(f.Name())
	if err := f.Truncate(1 << 20); err != nil {
		return err
	}
	// The first page of one file, again and again: neighbouring mappings'
	// offsets do not follow each other, so the kernel cannot merge them.
	for i := range 100000 {
		if _, err := syscall.Mmap(int(f.Fd()), 0, 4096, syscall.PROT_READ, syscall.MAP_SHARED); err != nil {
			return fmt.Errorf("mapping %d: %v", i, err)
		}
	}
	// 20,000 fds, or as many as the hard limit leaves (20,000 here, where
	// raising it is refused: the benchmark reports the count).
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	want := min(20000, int(lim.Max)-16)
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	for i := range want {
		if _, err := syscall.Open("/dev/null", syscall.O_RDONLY, 0); err != nil {
			return fmt.Errorf("fd %d: %v", i, err)
		}
	}
	os.Stdout.WriteString("ready\n")
	select {}
}

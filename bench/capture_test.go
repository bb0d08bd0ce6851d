// Package bench holds gpusnap's speed benchmarks. Run them in one go, so the
// ratios compare runs on the same machine under the same load:
//
//	go test -run x -bench . -benchmem ./bench/
//
// BenchmarkCapture against BenchmarkRawFloor is the cost of a whole-host
// capture over the kernel's own cost (BenchmarkCaptureOverFloor: wall and CPU
// time); BenchmarkMapsScanner (not root), BenchmarkMapsScannerRoot and
// BenchmarkMapsScannerRootStat (root, the path production takes) against
// BenchmarkProcfsProcMaps are the maps scanner over procfs on 50,000 lines.
package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	promprocfs "github.com/prometheus/procfs"

	"github.com/gpusnap/gpusnap/bench/floor"
	"github.com/gpusnap/gpusnap/capture"
	"github.com/gpusnap/gpusnap/capture/procfs"
	"github.com/gpusnap/gpusnap/snapshot"
)

func BenchmarkCapture(b *testing.B) {
	ctx := context.Background()
	opts := capture.Options{ProcRoot: "/proc", Path: capture.PathProc}
	procs := 0
	for b.Loop() {
		s, err := capture.Capture(ctx, opts)
		if err != nil {
			b.Fatal(err)
		}
		procs = s.Scan.ProcessesRead
	}
	b.ReportMetric(float64(procs), "procs")
}

// BenchmarkRawFloor is the capture's floor (bench/floor): one thread reading
// every /proc/PID/maps and readlinking every /proc/PID/fd/*, parsing nothing,
// with bare syscalls and reused buffers: the kernel's cost, not Go's.
func BenchmarkRawFloor(b *testing.B) {
	w := floor.NewWalker()
	var c floor.Counts
	for b.Loop() {
		c = walk(b, w)
	}
	b.ReportMetric(float64(c.Processes), "procs")
}

// BenchmarkCaptureOverFloor alternates a capture (by /proc, and by BPF
// iterators where the kernel loads them) and a floor walk and reports their
// ratio: on a shared, noisy machine only a ratio measured in one run
// means anything. x-floor is wall time; x-floor-cpu is CPU time (user and
// system, every thread of the process), which a capture's workers spread
// over the CPUs and the one-threaded floor does not: the cost to the host.
// The target is x-floor <= 1.0 (README, Speed and size).
func BenchmarkCaptureOverFloor(b *testing.B) {
	for _, path := range []string{capture.PathProc, capture.PathBPF} {
		b.Run(path, func(b *testing.B) { captureOverFloor(b, path) })
	}
}

func captureOverFloor(b *testing.B, path string) {
	ctx := context.Background()
	opts := capture.Options{ProcRoot: "/proc", Path: path}
	if _, err := capture.Capture(ctx, opts); err != nil {
		b.Skipf("capture by %s: %v", path, err)
	}
	w := floor.NewWalker()
	var capT, floorT, capCPU, floorCPU time.Duration
	var c floor.Counts
	for b.Loop() {
		t0, cpu0 := time.Now(), processCPU(b)
		if _, err := capture.Capture(ctx, opts); err != nil {
			b.Fatal(err)
		}
		t1, cpu1 := time.Now(), processCPU(b)
		c = walk(b, w)
		capT += t1.Sub(t0)
		floorT += time.Since(t1)
		capCPU += cpu1 - cpu0
		floorCPU += processCPU(b) - cpu1
	}
	b.ReportMetric(float64(capT)/float64(floorT), "x-floor")
	b.ReportMetric(float64(capCPU)/float64(floorCPU), "x-floor-cpu")
	b.ReportMetric(float64(capCPU)/float64(b.N)/float64(time.Millisecond), "capture-cpu-ms")
	b.ReportMetric(float64(floorCPU)/float64(b.N)/float64(time.Millisecond), "floor-cpu-ms")
	b.ReportMetric(float64(c.Processes), "procs")
}

// processCPU is the CPU time (user and system) of every thread of this
// process so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func walk(b *testing.B, w *floor.Walker) floor.Counts {
	c, err := w.Walk("/proc")
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// bigMaps writes a 50,000-line maps file as <dir>/1/maps: a large process
// (a JVM or a CUDA program with many libraries), with a few device lines.
func bigMaps(b *testing.B) string {
	dir := b.TempDir()
	var sb strings.Builder
	addr := uint64(0x7f0000000000)
	for i := range 50000 {
		path := fmt.Sprintf("/usr/lib/x86_64-linux-gnu/libfoo%d.so.1", i%300)
		perms := "r-xp"
		switch {
		case i%1000 == 0:
			path, perms = "/dev/nvidia"+strconv.Itoa(i%8), "rw-s"
		case i%3 == 0:
			path, perms = "", "rw-p"
		}
		inode := 1000 + i%300
		if perms == "rw-s" {
			inode = 0 // a device node: bigMapsKind
		}
		fmt.Fprintf(&sb, "%x-%x %s %08x fd:01 %d", addr, addr+0x1000, perms, i*4096, inode)
		if path != "" {
			sb.WriteString(strings.Repeat(" ", 10) + path)
		}
		sb.WriteByte('\n')
		addr += 0x2000
	}
	if err := os.MkdirAll(filepath.Join(dir, "1"), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "1", "maps"), []byte(sb.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	return dir
}

// BenchmarkMapsScanner is the scanner as it runs without root (Stat nil):
// a byte check dismisses every line whose path has no "/dev/" before it is
// parsed.
func BenchmarkMapsScanner(b *testing.B) {
	benchScanner(b, procfs.MapsScanner{})
}

// BenchmarkMapsScannerRoot is the scanner as it runs as root on the live
// /proc, the path production takes: stat of map_files decides, so every
// file-backed line is parsed (consecutive lines of one file once). Its Stat
// answers from memory, so this is the parsing alone; the stat system calls
// come on top (BenchmarkMapsScannerRootStat).
func BenchmarkMapsScannerRoot(b *testing.B) {
	benchScanner(b, procfs.MapsScanner{Stat: func(_, _ []byte, _, _ uint32, inode uint64) (snapshot.FileKind, bool) {
		return bigMapsKind(inode), true
	}})
}

// BenchmarkMapsScannerRootStat is BenchmarkMapsScannerRoot with one real
// stat system call per Stat, as capture makes one of map_files per file.
func BenchmarkMapsScannerRootStat(b *testing.B) {
	dir := b.TempDir()
	dirfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Close(dirfd)
	if err := os.WriteFile(filepath.Join(dir, "f"), nil, 0o644); err != nil {
		b.Fatal(err)
	}
	var st unix.Stat_t
	benchScanner(b, procfs.MapsScanner{Stat: func(_, _ []byte, _, _ uint32, inode uint64) (snapshot.FileKind, bool) {
		if err := unix.Fstatat(dirfd, "f", &st, 0); err != nil {
			return snapshot.FileKind{}, false
		}
		return bigMapsKind(inode), true
	}})
}

// bigMapsKind is what stat says of a bigMaps inode: its device lines have
// inode 0 and are NVIDIA character devices; every other file is a file.
func bigMapsKind(inode uint64) snapshot.FileKind {
	if inode == 0 {
		return snapshot.FileKind{Device: true, Char: true, Major: 195, Minor: 0}
	}
	return snapshot.FileKind{}
}

func benchScanner(b *testing.B, sc procfs.MapsScanner) {
	path := filepath.Join(bigMaps(b), "1", "maps")
	buf := make([]byte, 0, 8<<20)
	found := 0
	for b.Loop() {
		data, err := readInto(path, buf)
		if err != nil {
			b.Fatal(err)
		}
		found = len(sc.ScanMaps(data).Mappings)
	}
	if found != 50 {
		b.Fatalf("found %d device mappings, want 50", found)
	}
}

func BenchmarkProcfsProcMaps(b *testing.B) {
	fs, err := promprocfs.NewFS(bigMaps(b))
	if err != nil {
		b.Fatal(err)
	}
	p, err := fs.Proc(1)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		maps, err := p.ProcMaps()
		if err != nil || len(maps) != 50000 {
			b.Fatal(len(maps), err)
		}
	}
}

// readInto reads a file into buf, reusing it, as Capture does.
func readInto(path string, buf []byte) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf = buf[:0]
	for {
		n, err := f.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if n == 0 || err != nil {
			return buf, nil
		}
	}
}

// BenchmarkMapsFileRead reads the 50,000-line file and parses nothing: the
// floor under both the scanner and procfs.
func BenchmarkMapsFileRead(b *testing.B) {
	path := filepath.Join(bigMaps(b), "1", "maps")
	buf := make([]byte, 0, 8<<20)
	for b.Loop() {
		if _, err := readInto(path, buf); err != nil {
			b.Fatal(err)
		}
	}
}

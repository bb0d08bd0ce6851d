package kmsg

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusnap/gpusnap/snapshot"
)

// BenchmarkReadWindowFile reads a window of 10,000 records out of a log of
// 20,000 (the first half skipped by header), one in ten an Xid with a
// dictionary: the cost of the kernel-log half of a diff, parsing included.
// It runs with the garbage collector as tests have it (GOGC 100) and as the
// gpusnap command sets it (400: a command's heap lives tens of milliseconds),
// the path production takes.
func BenchmarkReadWindowFile(b *testing.B) {
	path := benchLog(b)
	from, to := &snapshot.KernelLogPosition{Next: 10_000}, &snapshot.KernelLogPosition{Next: 20_000}
	for _, gc := range []int{100, 400} {
		b.Run(fmt.Sprintf("gogc=%d", gc), func(b *testing.B) {
			defer debug.SetGCPercent(debug.SetGCPercent(gc))
			defer reportCPU(b)()
			for b.Loop() {
				w := ReadWindow(path, from, to)
				if len(w.Records) != 10_000 || len(w.Missing) > 0 {
					b.Fatalf("%d records, missing %q", len(w.Records), w.Missing)
				}
			}
		})
	}
}

// BenchmarkFileFloor reads the same log line by line and parses nothing:
// the least a reader of the file can cost.
func BenchmarkFileFloor(b *testing.B) {
	path := benchLog(b)
	defer reportCPU(b)()
	for b.Loop() {
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		r := bufio.NewReaderSize(f, 64<<10)
		lines := 0
		for {
			if _, err := r.ReadSlice('\n'); err != nil {
				break
			}
			lines++
		}
		f.Close()
		if lines != 24_000 {
			b.Fatalf("%d lines", lines)
		}
	}
}

// benchLog writes a log of 20,000 records, one in ten an Xid with two
// dictionary lines.
func benchLog(b *testing.B) string {
	path := filepath.Join(b.TempDir(), "kmsg")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	for seq := range 20_000 {
		if seq%10 == 0 {
			fmt.Fprintf(f, "4,%d,%d,-;NVRM: Xid (PCI:0000:3b:00): 31, pid=%d, name=python3, Ch 00000008, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f2c_5a000000\n SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0\n", seq, seq*1000, seq)
		} else {
			fmt.Fprintf(f, "6,%d,%d,-;eth0: link up, 100Gbps, full duplex, flow control rx/tx on port %d\n", seq, seq*1000, seq)
		}
	}
	f.Close()
	return path
}

// reportCPU reports the process's CPU time (user and system, garbage
// collection included) per operation beside the wall time: on a shared
// machine the wall time counts other programs' turns too.
func reportCPU(b *testing.B) func() {
	cpu := func() time.Duration {
		var ru unix.Rusage
		_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := cpu()
	return func() {
		b.ReportMetric(float64(cpu()-start)/float64(b.N)/1e6, "cpu-ms/op")
	}
}

// BenchmarkDeviceFloor and BenchmarkReadWindowDevice read every record of
// the live /dev/kmsg: the floor is one read(2) per record and nothing else
// (what the kernel costs), the other gpusnap's window read of the same records.
func BenchmarkDeviceFloor(b *testing.B) {
	buf := make([]byte, deviceRecordMax)
	n := 0
	defer reportCPU(b)()
	for b.Loop() {
		fd, err := unix.Open(DefaultPath, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			b.Skip(err)
		}
		n = 0
		for {
			_, err := unix.Read(fd, buf)
			if errors.Is(err, unix.EPIPE) {
				continue
			}
			if err != nil {
				break
			}
			n++
		}
		unix.Close(fd)
	}
	b.ReportMetric(float64(n), "records")
}

func BenchmarkReadWindowDevice(b *testing.B) {
	pos := ReadPosition(DefaultPath)
	if pos.Unavailable != "" {
		b.Skip(pos.Unavailable)
	}
	from := &snapshot.KernelLogPosition{Next: pos.First}
	n := 0
	defer reportCPU(b)()
	for b.Loop() {
		n = len(ReadWindow(DefaultPath, from, &pos).Records)
	}
	b.ReportMetric(float64(n), "records")
}

package watch

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/internal/livetest"
	"github.com/gpusnap/gpusnap/nvmlread"
)

// busyHost is a DGX H100 mock whose 8 GPUs each run 64 processes (PIDs of
// 7 digits, the widest), every one with a fresh utilization sample at
// each read, noisy, as training is: the most a util record must hold.
func busyHost() *server.Server {
	s := dgxh100.New()
	var stamp uint64
	for g, d := range s.Devices {
		procs := make([]nvml.ProcessInfo, 64)
		for k := range procs {
			procs[k] = nvml.ProcessInfo{Pid: uint32(4000000 + 100*g + k), UsedGpuMemory: 1 << 30}
		}
		dev := d.(*server.Device)
		livetest.ServeGPU(dev, procs...)
		dev.GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
			stamp++
			out := make([]nvml.ProcessUtilizationSample, len(procs))
			for k, p := range procs {
				out[k] = nvml.ProcessUtilizationSample{Pid: p.Pid, TimeStamp: stamp, SmUtil: uint32(40 + (k*7+int(stamp))%60), MemUtil: uint32(k % 100)}
			}
			return out, nvml.SUCCESS
		}
	}
	return s
}

// utilPipeline is watch's sampling path from a read of NVML to records in
// the journal: what each --util-interval costs.
type utilPipeline struct {
	sampler *nvmlread.Sampler
	records *utilRecords
	journal *eventlog.Journal
	pending []eventlog.Event
}

func newUtilPipeline(tb testing.TB, lib nvml.Interface) *utilPipeline {
	j, err := eventlog.OpenJournal(filepath.Join(tb.TempDir(), "log"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { j.Close() })
	starts := func(pid int) (uint64, bool) { return 1<<33 + uint64(pid), true } // 10-digit start times, the widest
	return &utilPipeline{sampler: nvmlread.NewSampler(nvmlread.Options{Lib: lib}, time.Now()), records: newUtilRecords(starts), journal: j}
}

// step reads NVML once at now and appends what the records emitted.
func (p *utilPipeline) step(tb testing.TB, now time.Time) {
	nv, err := p.sampler.Read()
	if err != nil {
		tb.Fatal(err)
	}
	p.records.add(now, samplesOf(&nv), func(e ...eventlog.Event) { p.pending = append(p.pending, e...) })
	p.append(tb)
}

func (p *utilPipeline) append(tb testing.TB) {
	if len(p.pending) > 0 {
		if _, err := p.journal.Append(p.pending); err != nil {
			tb.Fatal(err)
		}
		p.pending = p.pending[:0]
	}
}

// logSize is the journal's size in bytes.
func (p *utilPipeline) logSize(tb testing.TB) int64 {
	entries, err := os.ReadDir(p.journal.Dir())
	if err != nil {
		tb.Fatal(err)
	}
	var n int64
	for _, e := range entries {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
	}
	return n
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestUtilLogSize: an hour of samples of 8 GPUs with 64 processes each, one
// a second, grows the log by at most 2 MB a GPU.
func TestUtilLogSize(t *testing.T) {
	samples := 3600
	if testing.Short() {
		samples = 600
	}
	p := newUtilPipeline(t, busyHost())
	t0 := time.Now()
	for i := range samples {
		p.step(t, t0.Add(time.Duration(i)*time.Second))
	}
	p.records.flush(func(e ...eventlog.Event) { p.pending = append(p.pending, e...) })
	p.append(t)
	perHour := float64(p.logSize(t)) / 8 * 3600 / float64(samples)
	t.Logf("util records: %.2f MB an hour a GPU (64 processes, 1 s)", perHour/1e6)
	if perHour > 2e6 {
		t.Errorf("util records take %.2f MB an hour a GPU, above 2 MB", perHour/1e6)
	}
}

// BenchmarkUtilSampling is one --util-interval of watch on 8 GPUs with 64
// processes each: the read of NVML (go-nvml's mocks), the samples, the
// records and their journal appends. cpu-%core@1s is the share of one core
// it takes at the default interval; BenchmarkUtilFloor is the same reads
// of the mock with nothing done with them.
func BenchmarkUtilSampling(b *testing.B) {
	p := newUtilPipeline(b, busyHost())
	t0 := time.Now()
	cpu0 := cpuTime()
	b.ResetTimer()
	for i := range b.N {
		p.step(b, t0.Add(time.Duration(i)*time.Second))
	}
	b.StopTimer()
	cpu := cpuTime() - cpu0
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	b.ReportMetric(100*float64(cpu.Nanoseconds())/float64(b.N)/1e9, "cpu-%core@1s")
	b.ReportMetric(float64(p.logSize(b))/8*3600/float64(b.N)/1e6, "MB/GPU-hour")
}

// BenchmarkUtilFloor makes the calls a read makes of the mock, per GPU,
// and nothing else: the floor of BenchmarkUtilSampling.
func BenchmarkUtilFloor(b *testing.B) {
	s := busyHost()
	cpu0 := cpuTime()
	b.ResetTimer()
	for range b.N {
		s.Init()
		n, _ := s.DeviceGetCount()
		for i := range n {
			d, _ := s.DeviceGetHandleByIndex(i)
			d.GetUUID()
			d.GetName()
			d.GetMinorNumber()
			d.GetPciInfo()
			d.GetMemoryInfo_v2()
			d.GetMigMode()
			d.GetComputeRunningProcesses()
			d.GetGraphicsRunningProcesses()
			d.GetMPSComputeRunningProcesses()
			d.GetProcessUtilization(0)
			d.GetUtilizationRates()
			d.GetAccountingMode()
		}
		s.Shutdown()
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

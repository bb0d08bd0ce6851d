package nvmlread

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpusnap/gpusnap/internal/livetest"
)

// scriptedGPU is a dgxh100 device whose utilization calls answer from a
// script that, like some drivers and every mock, ignores the timestamp it
// is asked for: the sampler must drop what it already counted.
type scriptedGPU struct {
	samples []nvml.ProcessUtilizationSample
	asked   []uint64 // the lastSeenTimeStamp of each call
}

func scripted(t *testing.T) (*server.Server, *scriptedGPU) {
	t.Helper()
	s := dgxh100.New()
	for _, d := range s.Devices {
		livetest.ServeGPU(d.(*server.Device), v1Process(4242, 8*gib))
	}
	sg := &scriptedGPU{}
	d := s.Devices[0].(*server.Device)
	d.GetProcessUtilizationFunc = func(last uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		sg.asked = append(sg.asked, last)
		if len(sg.samples) == 0 {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return slices.Clone(sg.samples), nvml.SUCCESS
	}
	return s, sg
}

func TestSamplerChainsLastSeen(t *testing.T) {
	s, sg := scripted(t)
	sm := NewSampler(Options{Lib: s}, time.Now())
	sg.samples = []nvml.ProcessUtilizationSample{{Pid: 4242, TimeStamp: 100, SmUtil: 97}, {Pid: 4242, TimeStamp: 200, SmUtil: 99}}
	n, err := sm.Read()
	if err != nil {
		t.Fatal(err)
	}
	if got := n.Devices[0].ProcessUtilization; len(got) != 2 || got[0].SMUtil != 97 || got[1].SMUtil != 99 {
		t.Fatalf("first read: %+v", got)
	}
	if u := n.Devices[0].Utilization; u == nil || u.GPU != 90 || u.Memory != 30 {
		t.Fatalf("device utilization: %+v", u)
	}
	// The same samples again, and one new: only the new one counts.
	sg.samples = append(sg.samples, nvml.ProcessUtilizationSample{Pid: 4242, TimeStamp: 300, SmUtil: 50})
	n, _ = sm.Read()
	if got := n.Devices[0].ProcessUtilization; len(got) != 1 || got[0].Timestamp != 300 || got[0].SMUtil != 50 {
		t.Fatalf("second read counted again what the first had: %+v", got)
	}
	// Nothing new: no samples, which is zero use, not an error.
	n, _ = sm.Read()
	if got := n.Devices[0].ProcessUtilization; got != nil || n.Missing != nil {
		t.Fatalf("third read: %+v, missing %v", got, n.Missing)
	}
	if !slices.Equal(sg.asked, []uint64{0, 200, 300}) {
		t.Errorf("lastSeenTimeStamp asked: %v, want 0 200 300", sg.asked)
	}
	// A snapshot's read is not chained and reads no device utilization.
	n, _ = (Options{Lib: s}).ReadNVML()
	if got := n.Devices[0].ProcessUtilization; len(got) != 1 || got[0].Timestamp != 300 || n.Devices[0].Utilization != nil {
		t.Errorf("snapshot read: %+v, %+v", got, n.Devices[0].Utilization)
	}
}

// A driver without nvmlDeviceGetProcessUtilization: the per-process figures
// are said missing, the device's own are read.
func TestSamplerDriverWithoutProcessUtilization(t *testing.T) {
	s, sg := scripted(t)
	s.LookupSymbolFunc = func(sym string) error {
		if sym == symUtilization {
			return errors.New("undefined symbol")
		}
		return nil
	}
	n, err := NewSampler(Options{Lib: s}, time.Now()).Read()
	if err != nil {
		t.Fatal(err)
	}
	if why := n.Missing["devices[0].process_utilization"]; why != "not in this driver" {
		t.Errorf("missing: %v", n.Missing)
	}
	if n.Devices[0].Utilization == nil || len(sg.asked) != 0 {
		t.Errorf("device utilization %+v, calls %v", n.Devices[0].Utilization, sg.asked)
	}
}

// A device whose utilization call fails says so; the rest is read.
func TestSamplerUtilizationUnsupported(t *testing.T) {
	s, _ := scripted(t)
	s.Devices[1].(*server.Device).GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
		return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED
	}
	n, _ := NewSampler(Options{Lib: s}, time.Now()).Read()
	if n.Devices[1].Utilization != nil || n.Missing["devices[1].utilization"] != "not supported" || n.Devices[1].ComputeProcesses == nil {
		t.Errorf("device 1: %+v, missing %v", n.Devices[1], n.Missing)
	}
}

const seriesFixture = `{
  "devices": [{"index": 0, "uuid": "GPU-a", "minor_number": 0, "memory": {"total": 100, "used": 0, "free": 100}}],
  "series": [
    {"at": 0, "devices": [{"index": 0, "uuid": "GPU-a", "minor_number": 0, "utilization": {"gpu": 0, "memory": 0},
      "memory": {"total": 100, "used": 0, "free": 100}}]},
    {"at": 0.5, "devices": [{"index": 0, "uuid": "GPU-a", "minor_number": 0, "utilization": {"gpu": 98, "memory": 40},
      "memory": {"total": 100, "used": 90, "free": 10},
      "compute_processes": [{"pid": 77, "used_gpu_memory": 90}],
      "process_utilization": [{"pid": 77, "sm_util": 98, "mem_util": 40}]}]}
  ]
}`

func TestSamplerReplaysFixtureSeries(t *testing.T) {
	path := filepath.Join(t.TempDir(), "series.json")
	if err := os.WriteFile(path, []byte(seriesFixture), 0o600); err != nil {
		t.Fatal(err)
	}
	n, err := NewSampler(Options{FixturePath: path}, time.Now()).Read()
	if err != nil {
		t.Fatal(err)
	}
	if u := n.Devices[0].Utilization; u == nil || u.GPU != 0 || n.Devices[0].ComputeProcesses != nil {
		t.Fatalf("at 0: %+v", n.Devices[0])
	}
	sm := NewSampler(Options{FixturePath: path}, time.Now().Add(-time.Second))
	for range 2 { // each read finds the entry's samples new: the replay stamps them
		n, _ = sm.Read()
		g := n.Devices[0]
		if g.Utilization == nil || g.Utilization.GPU != 98 || len(g.ProcessUtilization) != 1 || g.ProcessUtilization[0].SMUtil != 98 {
			t.Fatalf("at 1s: %+v", g)
		}
		time.Sleep(2 * time.Millisecond) // workload: the next read comes after this one's stamps
	}
	// A snapshot reads the fixture's own devices, never the series.
	n, _ = (Options{FixturePath: path}).ReadNVML()
	if n.Devices[0].Utilization != nil || n.Devices[0].Memory.Used != 0 {
		t.Errorf("snapshot of a series fixture: %+v", n.Devices[0])
	}
}

func TestFixtureSeriesChecked(t *testing.T) {
	for name, bad := range map[string]string{
		"out of order": `{"devices": [], "series": [{"at": 2, "devices": []}, {"at": 1, "devices": []}]}`,
		"negative":     `{"devices": [], "series": [{"at": -1, "devices": []}]}`,
		"percent":      `{"devices": [], "series": [{"at": 0, "devices": [{"index": 0, "uuid": "G", "utilization": {"gpu": 101, "memory": 0}}]}]}`,
		"not a number": `{"devices": [], "series": [{"at": "soon", "devices": []}]}`,
		"dup uuid":     `{"devices": [], "series": [{"at": 0, "devices": [{"index": 0, "uuid": "G"}, {"index": 1, "uuid": "G"}]}]}`,
	} {
		if _, err := parseNVMLFixture([]byte(bad)); err == nil {
			t.Errorf("%s: accepted", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

// fixtures/nvml/series-busy-gpu.json, the demo of a series: a tenant on
// GPU 1 until 5 s, then GPU 1 pinned at 100% with no process and GPU 0
// running a flat 98% process.
func TestSeriesDemoFixture(t *testing.T) {
	const path = "../fixtures/nvml/series-busy-gpu.json"
	n, err := NewSampler(Options{FixturePath: path}, time.Now()).Read()
	if err != nil {
		t.Fatal(err)
	}
	if g := n.Devices[1]; g.Utilization.GPU != 71 || len(g.ComputeProcesses) != 1 || g.ProcessUtilization[0].PID != 5151 {
		t.Errorf("at 0, GPU 1: %+v", g)
	}
	n, _ = NewSampler(Options{FixturePath: path}, time.Now().Add(-6*time.Second)).Read()
	if g := n.Devices[1]; g.Utilization.GPU != 100 || g.ComputeProcesses != nil || g.Memory.Used != 0 {
		t.Errorf("at 6 s, GPU 1: %+v", g)
	}
	if g := n.Devices[0]; g.Utilization.GPU != 98 || g.ProcessUtilization[0].SMUtil != 98 {
		t.Errorf("at 6 s, GPU 0: %+v", g)
	}
}

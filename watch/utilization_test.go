package watch

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/nvmlread"
	"github.com/gpusnap/gpusnap/snapshot"
)

func gpuWith(uuid string, sm uint32, pids ...int) snapshot.GPU {
	g := snapshot.GPU{UUID: uuid, Utilization: &snapshot.Utilization{GPU: sm, Memory: 10}, Memory: &snapshot.Memory{Total: 80 << 30, Used: 4 << 30}}
	for k, pid := range pids {
		g.ComputeProcesses = append(g.ComputeProcesses, snapshot.GPUProcess{PID: pid})
		g.ProcessUtilization = append(g.ProcessUtilization, snapshot.ProcessUtilization{PID: pid, SMUtil: uint32(k % 101), MemUtil: 5})
	}
	return g
}

func collect(events *[]eventlog.Event) func(...eventlog.Event) {
	return func(e ...eventlog.Event) { *events = append(*events, e...) }
}

// 70 processes on a GPU: the 64 busiest are kept, 6 counted; a listed
// process without a sample is zero use; values above 100 are clamped and said.
func TestUtilRecordsBoundProcesses(t *testing.T) {
	pids := make([]int, 70)
	for i := range pids {
		pids[i] = 1000 + i
	}
	g := gpuWith("GPU-a", 250, pids...)
	g.ComputeProcesses = append(g.ComputeProcesses, snapshot.GPUProcess{PID: 5})
	g.ProcessUtilization = append(g.ProcessUtilization, snapshot.ProcessUtilization{PID: 1069, SMUtil: 300, MemUtil: 1})
	var got []eventlog.Event
	u := newUtilRecords(func(pid int) (uint64, bool) { return uint64(pid * 10), true })
	u.add(time.Now(), samplesOf(&snapshot.NVML{Devices: []snapshot.GPU{g}}), collect(&got))
	u.flush(collect(&got))
	if len(got) != 1 || got[0].Kind != eventlog.KindUtil {
		t.Fatalf("records: %+v", got)
	}
	r := got[0].Util
	if len(r.Procs) != eventlog.MaxUtilProcesses || r.More != 7 || r.Listed[0] != 71 || r.SM[0] != 100 || r.UsedMiB[0] != 4096 {
		t.Fatalf("%d processes, %d more, listed %v, sm %v, used %v", len(r.Procs), r.More, r.Listed, r.SM, r.UsedMiB)
	}
	busiest := r.Procs[len(r.Procs)-1] // sorted by PID: 1069 last, the mean of 69 and 100 (300 clamped)
	if sm, _, ok := busiest.Value(0); busiest.PID != 1069 || !ok || sm != 85 || busiest.StartTime != 10690 {
		t.Errorf("busiest: %+v (sm %d)", busiest, sm)
	}
	for _, p := range r.Procs {
		if p.PID < 1006 { // 5 and 1000 to 1005 are the 7 least busy

			t.Errorf("kept %d, an idle process, over busier ones", p.PID)
		}
	}
	if len(r.Notes) != 1 || r.Notes[0] != "2 values NVML gave above 100% clamped to 100" {
		t.Errorf("notes: %q", r.Notes)
	}
}

// A record holds utilBatch samples; a process that joins or leaves is
// absent in the samples it was not in; a MIG instance has its own record.
func TestUtilRecordsBatch(t *testing.T) {
	var got []eventlog.Event
	u := newUtilRecords(func(int) (uint64, bool) { return 0, false })
	t0 := time.Now()
	mig := 1
	for i := range utilBatch + 5 {
		g := gpuWith("GPU-a", 98, 10)
		if i%2 == 1 {
			g = gpuWith("GPU-a", 98, 10, 11)
		}
		g.MIGMode = &mig
		g.MIGDevices = []snapshot.MIGDevice{{UUID: "MIG-a", ComputeProcesses: []snapshot.GPUProcess{{PID: 12}}}}
		u.add(t0.Add(time.Duration(i)*time.Second), samplesOf(&snapshot.NVML{Devices: []snapshot.GPU{g}}), collect(&got))
	}
	if len(got) != 2 || got[0].Util.GPU != "GPU-a" || got[1].Util.GPU != "MIG-a" {
		t.Fatalf("records after %d samples: %d", utilBatch+5, len(got))
	}
	u.flush(collect(&got))
	r := got[0].Util
	if r.Len() != utilBatch || r.At[utilBatch-1] != int64(utilBatch-1)*1000 || r.Listed[0] != 2 {
		t.Fatalf("first record: %d samples, at %v, listed %v", r.Len(), r.At, r.Listed)
	}
	if _, _, ok := r.Procs[1].Value(0); ok || r.Procs[1].PID != 11 {
		t.Errorf("pid 11 in sample 0: %+v", r.Procs[1])
	}
	if sm, _, ok := r.Procs[1].Value(1); !ok || sm != 1 {
		t.Errorf("pid 11 in sample 1: %d %v", sm, ok)
	}
	m := got[1].Util
	if m.Parent != "GPU-a" || m.SM[0] != -1 || m.Listed[0] != 1 || len(m.Procs) != 0 || m.Notes[0] != migNote {
		t.Errorf("MIG record: %+v", m)
	}
	if len(got) != 4 || got[2].Util.Len() != 5 || !got[2].Time.Equal(t0.Add(utilBatch*time.Second)) {
		t.Errorf("after flush: %d records", len(got))
	}
}

// The real watch replays a fixture's series: util records reach the log,
// each sample the entry due at its time.
func TestWatchRecordsFixtureSeries(t *testing.T) {
	dir := t.TempDir()
	fixture := filepath.Join(dir, "nvml.json")
	err := os.WriteFile(fixture, []byte(`{"devices": [], "series": [
	  {"at": 0, "devices": [{"index": 0, "uuid": "GPU-s", "utilization": {"gpu": 0, "memory": 0}}]},
	  {"at": 0.6, "devices": [{"index": 0, "uuid": "GPU-s", "utilization": {"gpu": 100, "memory": 5}}]}]}`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "gpusnap.db")
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	if _, err := Run(ctx, Options{DB: db, ProcRoot: t.TempDir(), Mode: ModeFallback, Interval: time.Hour,
		UtilInterval: 100 * time.Millisecond, NVML: nvmlread.Options{FixturePath: fixture}}); err != nil {
		t.Fatal(err)
	}
	res, err := eventlog.ReadEvents(eventlog.JournalDir(db), time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	var idle, busy int
	for _, e := range res.Events {
		if e.Kind != eventlog.KindUtil {
			continue
		}
		for i, sm := range e.Util.SM {
			at := e.Util.SampleTime(e.Time, i)
			switch {
			case sm == 0:
				idle++
			case sm == 100 && e.Util.Listed[i] == 0:
				busy++
			default:
				t.Errorf("sample at %s: sm %d", at, sm)
			}
		}
	}
	if idle < 3 || busy < 5 {
		t.Errorf("%d idle samples, %d busy: want the series replayed", idle, busy)
	}
}

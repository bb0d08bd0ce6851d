package watch

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/internal/livetest"
	"github.com/gpusnap/gpusnap/internal/testwait"
	"github.com/gpusnap/gpusnap/nvmlread"
)

// eventServer is a DGX A100 whose event set answers the waits in order,
// then times out; GPU 7 supports no Xid or ECC event (as a GPU without
// them would answer).
func eventServer(t *testing.T, waits ...func(srv *server.Server) (nvml.EventData, nvml.Return)) (*server.Server, *mock.EventSet) {
	t.Helper()
	srv := dgxa100.New()
	set := &mock.EventSet{FreeFunc: func() nvml.Return { return nvml.SUCCESS }}
	var mu sync.Mutex
	set.WaitFunc = func(ms uint32) (nvml.EventData, nvml.Return) {
		mu.Lock()
		if len(waits) == 0 {
			mu.Unlock()
			time.Sleep(time.Duration(ms) * time.Millisecond) // workload: NVML's wait blocks for its timeout
			return nvml.EventData{}, nvml.ERROR_TIMEOUT
		}
		w := waits[0]
		waits = waits[1:]
		mu.Unlock()
		return w(srv)
	}
	srv.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return set, nvml.SUCCESS }
	for i, d := range srv.Devices {
		dev := d.(*server.Device)
		livetest.ServeGPU(dev)
		supported := uint64(nvml.EventTypeAll)
		if i == 7 {
			supported = nvml.EventTypePState
		}
		dev.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) { return supported, nvml.SUCCESS }
		dev.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS }
	}
	return srv, set
}

// runWatch runs a fallback watch of an empty proc root with lib as NVML
// until stop is called; stop returns how long the watch took to end.
func runWatchWith(t *testing.T, lib nvml.Interface) (db string, start eventlog.Event, log *syncLog, stop func() time.Duration) {
	t.Helper()
	db = filepath.Join(t.TempDir(), "gpusnap.db")
	log = &syncLog{}
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan eventlog.Event, 1)
	done := make(chan error, 1)
	go func() {
		_, err := Run(ctx, Options{DB: db, ProcRoot: t.TempDir(), Mode: ModeFallback, Log: log, Interval: time.Hour,
			NVML:    nvmlread.Options{Lib: lib, Timeout: 5 * time.Second},
			Started: func(e eventlog.Event) { started <- e }})
		done <- err
	}()
	select {
	case start = <-started:
	case err := <-done:
		t.Fatalf("watch did not start: %v", err)
	case <-time.After(time.Minute):
		cancel()
		t.Fatal("watch did not start in a minute")
	}
	stop = func() time.Duration {
		began := time.Now()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("watch: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("watch did not stop in 30s")
		}
		return time.Since(began)
	}
	t.Cleanup(func() {
		if ctx.Err() == nil {
			stop()
		}
	})
	return db, start, log, stop
}

// A watch records each GPU event NVML delivers: an Xid, an ECC error of a
// MIG instance, a failing wait (as lost events), the GPU lost (after which it
// stops waiting); watch_start names the GPU whose events are not watched.
func TestWatchRecordsGPUEvents(t *testing.T) {
	none := uint32(1<<32 - 1)
	gi, ci := uint32(1), uint32(0)
	srv, set := eventServer(t,
		func(srv *server.Server) (nvml.EventData, nvml.Return) {
			return nvml.EventData{Device: srv.Devices[0], EventType: nvml.EventTypeXidCriticalError, EventData: 79, GpuInstanceId: none, ComputeInstanceId: none}, nvml.SUCCESS
		},
		func(*server.Server) (nvml.EventData, nvml.Return) { return nvml.EventData{}, nvml.ERROR_TIMEOUT },
		func(srv *server.Server) (nvml.EventData, nvml.Return) {
			return nvml.EventData{Device: srv.Devices[1], EventType: nvml.EventTypeDoubleBitEccError, GpuInstanceId: gi, ComputeInstanceId: ci}, nvml.SUCCESS
		},
		func(*server.Server) (nvml.EventData, nvml.Return) { return nvml.EventData{}, nvml.ERROR_UNKNOWN },
		func(*server.Server) (nvml.EventData, nvml.Return) { return nvml.EventData{}, nvml.ERROR_GPU_IS_LOST },
	)
	db, start, log, stop := runWatchWith(t, srv)
	uuid := func(i int) string { return srv.Devices[i].(*server.Device).UUID }
	if blind := strings.Join(start.Blind, "\n"); !strings.Contains(blind, "NVML events of "+uuid(7)+" (supports neither Xid nor ECC events)") ||
		strings.Contains(blind, uuid(0)) {
		t.Errorf("watch_start blind spots: %q", start.Blind)
	}
	testwait.Until(t, 20*time.Second, "the GPU lost to end the waiting and free the event set", func() bool { return len(set.FreeCalls()) > 0 })
	stop()
	var got []eventlog.Event
	for _, e := range readAll(t, db).Events {
		if e.Kind == eventlog.KindGPUEvent || e.Kind == eventlog.KindLost {
			got = append(got, e)
		}
	}
	if len(got) != 4 {
		t.Fatalf("%d GPU events and lost records, want 4: %+v\n%s", len(got), got, log.String())
	}
	if e := got[0]; e.GPUEvent != eventlog.GPUEventXid || e.Xid != 79 || e.GPUUUID != uuid(0) || e.Source != eventlog.SourceNVML || e.GPUInstanceID != nil || e.Time.IsZero() {
		t.Errorf("Xid 79: %+v", e)
	}
	if e := got[1]; e.GPUEvent != eventlog.GPUEventECCDoubleBit || e.GPUUUID != uuid(1) || e.GPUInstanceID == nil || *e.GPUInstanceID != 1 || e.ComputeInstanceID == nil || *e.ComputeInstanceID != 0 {
		t.Errorf("double-bit ECC error on MIG instance 1/0: %+v", e)
	}
	if e := got[2]; e.Kind != eventlog.KindLost || e.Source != eventlog.SourceNVML || !strings.Contains(e.Note, "NVML's GPU events: nvml event wait: unknown error") {
		t.Errorf("a failing wait: %+v", e)
	}
	if e := got[3]; e.GPUEvent != eventlog.GPUEventGPULost || !strings.Contains(e.Note, "no GPU's events are watched after this") {
		t.Errorf("GPU lost: %+v", e)
	}
	// The stop record (as every heartbeat after the loss) says it again,
	// for a window that begins after the loss.
	var stopRec *eventlog.Event
	events := readAll(t, db).Events
	for i := range events {
		if events[i].Kind == eventlog.KindWatchStop {
			stopRec = &events[i]
		}
	}
	if stopRec == nil || !strings.Contains(stopRec.GPUEventsOff, "is lost") {
		t.Errorf("watch_stop: %+v, want it to say NVML's events stopped with the GPU lost", stopRec)
	}
}

// NVML that never answers a wait does not hold up the watch's stop.
func TestWatchStopsWithNVMLHung(t *testing.T) {
	srv, set := eventServer(t)
	hung, waiting := make(chan struct{}), make(chan struct{})
	defer close(hung)
	var once sync.Once
	set.WaitFunc = func(uint32) (nvml.EventData, nvml.Return) {
		once.Do(func() { close(waiting) })
		<-hung
		return nvml.EventData{}, nvml.ERROR_TIMEOUT
	}
	_, _, log, stop := runWatchWith(t, srv)
	select {
	case <-waiting:
	case <-time.After(20 * time.Second):
		t.Fatal("the watch never waited for NVML's events")
	}
	// The stop waits 500 ms for NVML; a hung wait holds it forever, and 30 s
	// is a loaded host's slack.
	if took := stop(); took > 30*time.Second {
		t.Errorf("the watch took %s to stop", took)
	}
	if !strings.Contains(log.String(), "did not return; stopping without it") {
		t.Errorf("the watch did not say it left NVML's wait behind: %s", log.String())
	}
}

// Without NVML's events (turned off, a fixture, a library that cannot be
// loaded) watch_start says they are not watched.
func TestWatchSaysGPUEventsUnwatched(t *testing.T) {
	for _, tc := range []struct {
		opts nvmlread.Options
		want string
	}{
		{nvmlread.Options{Disabled: true}, "Xid and ECC events from NVML (disabled by --no-nvml)"},
		{nvmlread.Options{FixturePath: "../fixtures/nvml/h100x8.json"}, "Xid and ECC events from NVML (an NVML fixture is read, not the driver: it has no events)"},
		{nvmlread.Options{Lib: nvml.New(nvml.WithLibraryPath("/nonexistent/libnvidia-ml.so.1"))}, "Xid and ECC events from NVML (nvml: library not found)"},
	} {
		_, blind := openGPUEvents(tc.opts)
		if len(blind) != 1 || blind[0] != tc.want {
			t.Errorf("%+v: blind %q, want %q", tc.opts, blind, tc.want)
		}
	}
}

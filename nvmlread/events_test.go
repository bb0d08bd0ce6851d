package nvmlread

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/gpusnap/gpusnap/eventlog"
)

// eventHost is a host of GPUs that support the given event types, whose
// event set answers the waits in order.
func eventHost(t *testing.T, supported []uint64, waits ...func() (nvml.EventData, nvml.Return)) (*mock.Interface, map[int]uint64) {
	t.Helper()
	registered := map[int]uint64{}
	set := &mock.EventSet{FreeFunc: func() nvml.Return { return nvml.SUCCESS }}
	set.WaitFunc = func(ms uint32) (nvml.EventData, nvml.Return) {
		if len(waits) == 0 {
			t.Fatal("a wait past the test's events")
		}
		w := waits[0]
		waits = waits[1:]
		return w()
	}
	var devs []nvml.Device
	for i, s := range supported {
		d := mockGPU(i)
		d.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) { return s, nvml.SUCCESS }
		d.RegisterEventsFunc = func(mask uint64, got nvml.EventSet) nvml.Return {
			if got != set {
				t.Errorf("GPU %d registered in another set", i)
			}
			registered[i] = mask
			return nvml.SUCCESS
		}
		devs = append(devs, d)
	}
	lib := mockLib(nil, devs...)
	lib.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return set, nvml.SUCCESS }
	return lib, registered
}

func TestGPUEvents(t *testing.T) {
	noInstance := uint32(math.MaxUint32)
	gpu0 := mockGPU(0)
	lib, registered := eventHost(t,
		// GPU 0 supports everything; GPU 1 no ECC (a GeForce); GPU 2 neither.
		[]uint64{nvml.EventTypeAll, nvml.EventTypeXidCriticalError | nvml.EventTypePState, nvml.EventTypeClock},
		func() (nvml.EventData, nvml.Return) {
			return nvml.EventData{Device: gpu0, EventType: nvml.EventTypeXidCriticalError, EventData: 79,
				GpuInstanceId: noInstance, ComputeInstanceId: noInstance}, nvml.SUCCESS
		},
		func() (nvml.EventData, nvml.Return) {
			// A MIG instance's error comes through its GPU, with the instance ids.
			return nvml.EventData{Device: gpu0, EventType: nvml.EventTypeDoubleBitEccError, GpuInstanceId: 3, ComputeInstanceId: 0}, nvml.SUCCESS
		},
		func() (nvml.EventData, nvml.Return) { return nvml.EventData{}, nvml.ERROR_TIMEOUT },
		func() (nvml.EventData, nvml.Return) { return nvml.EventData{}, nvml.ERROR_GPU_IS_LOST },
		func() (nvml.EventData, nvml.Return) { return nvml.EventData{}, nvml.ERROR_UNKNOWN },
	)
	ev, err := WatchGPUEvents(lib)
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Close()
	if registered[0] != gpuEventMask || registered[1] != nvml.EventTypeXidCriticalError || len(registered) != 2 {
		t.Errorf("registered masks %v: want each GPU's supported part of Xid and ECC", registered)
	}
	if len(ev.Unwatched) != 2 || ev.Unwatched["GPU-2"] != "supports neither Xid nor ECC events" ||
		ev.Unwatched["GPU-1"] != "the rest are watched, but it does not support double-bit ECC events or single-bit ECC events" {
		t.Errorf("unwatched %v", ev.Unwatched)
	}

	e, err := ev.Next(time.Second)
	if err != nil || e.Type != eventlog.GPUEventXid || e.Xid != 79 || e.GPUUUID != "GPU-0" || e.GPUInstanceID != nil || e.Time.IsZero() {
		t.Errorf("Xid 79: %+v, %v", e, err)
	}
	e, err = ev.Next(time.Second)
	if err != nil || e.Type != eventlog.GPUEventECCDoubleBit || e.GPUInstanceID == nil || *e.GPUInstanceID != 3 || *e.ComputeInstanceID != 0 {
		t.Errorf("ECC on MIG instance 3: %+v, %v", e, err)
	}
	if _, err := ev.Next(time.Millisecond); !errors.Is(err, ErrNoGPUEvent) {
		t.Errorf("timeout: %v", err)
	}
	if e, err := ev.Next(time.Second); err != nil || e.Type != eventlog.GPUEventGPULost {
		t.Errorf("GPU lost: %+v, %v", e, err)
	}
	if _, err := ev.Next(time.Second); err == nil {
		t.Error("an unknown error passed as an event")
	}
}

// Without the library nothing but Init is called.
func TestGPUEventsInitFails(t *testing.T) {
	lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}
	if _, err := WatchGPUEvents(lib); err == nil || err.Error() != "nvml: library not found" {
		t.Errorf("err %v", err)
	}
}

// A driver that does not answer within the timeout is left behind, and the
// registration it finally makes is closed; NVML turned off or replayed from
// a fixture has no events.
func TestOpenGPUEvents(t *testing.T) {
	lib, _ := eventHost(t, []uint64{nvml.EventTypeAll})
	answer := make(chan struct{})
	lib.InitFunc = func() nvml.Return {
		<-answer
		return nvml.SUCCESS
	}
	shut := make(chan struct{})
	lib.ShutdownFunc = func() nvml.Return {
		close(shut)
		return nvml.SUCCESS
	}
	if _, err := OpenGPUEvents(Options{Lib: lib, Timeout: 50 * time.Millisecond}); err == nil || !strings.Contains(err.Error(), "timed out after 50ms") {
		t.Fatalf("err %v", err)
	}
	close(answer)
	select {
	case <-shut:
	case <-time.After(10 * time.Second):
		t.Error("the late registration was not closed")
	}
	for _, opts := range []Options{{Disabled: true}, {FixturePath: "x.json"}} {
		if e, err := OpenGPUEvents(opts); e != nil || err == nil {
			t.Errorf("%+v: %v, %v", opts, e, err)
		}
	}
}

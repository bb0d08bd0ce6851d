package nvmlread

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpusnap/gpusnap/eventlog"

	"github.com/gpusnap/gpusnap/snapshot"
)

// GPUEvent is one event NVML delivered for a GPU, a critical Xid or an ECC
// error, as the driver reports it beside the kernel log's Xid lines.
type GPUEvent struct {
	Time    time.Time `json:"time"` // when Next returned it
	Type    string    `json:"type"` // eventlog.GPUEventXid, ...
	Xid     uint64    `json:"xid,omitempty"`
	GPUUUID string    `json:"gpu_uuid,omitempty"`
	// GPUInstanceID and ComputeInstanceID name the MIG instance an event is
	// of, or are nil for the whole GPU.
	GPUInstanceID     *uint32 `json:"gpu_instance_id,omitempty"`
	ComputeInstanceID *uint32 `json:"compute_instance_id,omitempty"`
}

// gpuEventMask is what NVIDIA's k8s-device-plugin watches for its health
// checks, critical Xids and ECC errors. Each GPU registers the part of it
// the GPU supports.
const gpuEventMask = nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError | nvml.EventTypeSingleBitEccError

// ErrNoGPUEvent is Next's answer when the timeout passed without an event.
var ErrNoGPUEvent = errors.New("no GPU event before the timeout")

// GPUEvents waits for NVML's events of every GPU. gpusnap watch polls it
// and records each event in the event log.
type GPUEvents struct {
	lib nvml.Interface
	set nvml.EventSet
	// Unwatched names, by GPU (UUID, or devices[i] where the UUID could not
	// be read), which of its events are not watched and why.
	Unwatched map[string]string
}

// OpenGPUEvents is WatchGPUEvents of the library opts names (Lib, else
// libnvidia-ml), bounded by opts.Timeout (0 waits as long as it takes). A
// driver that does not answer is left behind, its registration closed when
// it returns. NVML turned off, or replayed from a fixture, has no events.
func OpenGPUEvents(opts Options) (*GPUEvents, error) {
	switch {
	case opts.Disabled:
		return nil, errors.New("disabled by --no-nvml")
	case opts.FixturePath != "":
		return nil, errors.New("an NVML fixture is read, not the driver: it has no events")
	}
	lib := opts.Lib
	if lib == nil {
		lib = nvml.New()
	}
	type opened struct {
		e   *GPUEvents
		err error
	}
	done := make(chan opened, 1)
	go func() {
		e, err := WatchGPUEvents(lib)
		done <- opened{e, err}
	}()
	var timeout <-chan time.Time
	if opts.Timeout > 0 {
		t := time.NewTimer(opts.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case o := <-done:
		return o.e, o.err
	case <-timeout:
		go func() {
			if o := <-done; o.e != nil {
				o.e.Close()
			}
		}()
		return nil, fmt.Errorf("timed out after %s: libnvidia-ml did not answer (see --nvml-timeout)", opts.Timeout)
	}
}

// WatchGPUEvents initializes lib and registers every GPU's supported Xid and
// ECC events in one event set. MIG instances are not registered apart, as
// their events come through their GPU, with the instance ids set. It makes
// no call after a failed Init (a call then kills the process in the dynamic
// linker).
func WatchGPUEvents(lib nvml.Interface) (*GPUEvents, error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("nvml: %s", nvmlReason(ret))
	}
	e := &GPUEvents{lib: lib, Unwatched: map[string]string{}}
	set, ret := lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		lib.Shutdown() //nolint:errcheck // nothing was read
		return nil, fmt.Errorf("nvml event set: %s", nvmlReason(ret))
	}
	e.set = set
	count, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		e.Close()
		return nil, fmt.Errorf("nvml devices: %s", nvmlReason(ret))
	}
	for i := range count {
		name := snapshot.DeviceKey(i)
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			e.Unwatched[name] = nvmlReason(ret)
			continue
		}
		if uuid, ret := dev.GetUUID(); ret == nvml.SUCCESS {
			name = uuid
		}
		supported, ret := dev.GetSupportedEventTypes()
		if ret != nvml.SUCCESS {
			e.Unwatched[name] = "supported events: " + nvmlReason(ret)
			continue
		}
		mask := gpuEventMask & supported
		if mask == 0 {
			e.Unwatched[name] = "supports neither Xid nor ECC events"
			continue
		}
		if ret := dev.RegisterEvents(mask, set); ret != nvml.SUCCESS {
			e.Unwatched[name] = "register events: " + nvmlReason(ret)
			continue
		}
		if mask != gpuEventMask {
			e.Unwatched[name] = "the rest are watched, but it does not support " + missingEvents(gpuEventMask&^mask)
		}
	}
	return e, nil
}

// missingEvents names the events of mask.
func missingEvents(mask uint64) string {
	var names []string
	for _, t := range []struct {
		bit  uint64
		name string
	}{
		{nvml.EventTypeXidCriticalError, "Xid events"},
		{nvml.EventTypeDoubleBitEccError, "double-bit ECC events"},
		{nvml.EventTypeSingleBitEccError, "single-bit ECC events"},
	} {
		if mask&t.bit != 0 {
			names = append(names, t.name)
		}
	}
	return strings.Join(names, " or ")
}

// Next waits up to timeout for the next event. ErrNoGPUEvent says none
// came. A lost GPU is an event of its own (eventlog.GPUEventGPULost), as
// the device plugin marks every GPU unhealthy then.
func (e *GPUEvents) Next(timeout time.Duration) (GPUEvent, error) {
	data, ret := e.set.Wait(uint32(min(timeout.Milliseconds(), math.MaxUint32)))
	ev := GPUEvent{Time: time.Now()}
	switch ret {
	case nvml.SUCCESS:
	case nvml.ERROR_TIMEOUT:
		return ev, ErrNoGPUEvent
	case nvml.ERROR_GPU_IS_LOST:
		ev.Type = eventlog.GPUEventGPULost
		return ev, nil
	default:
		return ev, fmt.Errorf("nvml event wait: %s", nvmlReason(ret))
	}
	switch data.EventType {
	case nvml.EventTypeXidCriticalError:
		ev.Type, ev.Xid = eventlog.GPUEventXid, data.EventData
	case nvml.EventTypeDoubleBitEccError:
		ev.Type = eventlog.GPUEventECCDoubleBit
	case nvml.EventTypeSingleBitEccError:
		ev.Type = eventlog.GPUEventECCSingleBit
	default:
		return ev, fmt.Errorf("nvml event of type %d, not registered", data.EventType)
	}
	if data.Device != nil {
		if uuid, ret := data.Device.GetUUID(); ret == nvml.SUCCESS {
			ev.GPUUUID = uuid
		}
	}
	if data.GpuInstanceId != math.MaxUint32 {
		ev.GPUInstanceID = &data.GpuInstanceId
	}
	if data.ComputeInstanceId != math.MaxUint32 {
		ev.ComputeInstanceID = &data.ComputeInstanceId
	}
	return ev, nil
}

// Close frees the event set and shuts NVML down.
func (e *GPUEvents) Close() {
	if e.set != nil {
		e.set.Free() //nolint:errcheck // nothing to do if it fails
	}
	e.lib.Shutdown() //nolint:errcheck
}

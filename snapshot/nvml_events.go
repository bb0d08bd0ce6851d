package snapshot

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// GPUEvent is one event NVML delivered for a GPU: a critical Xid or an ECC
// error, as the driver reports it beside the kernel log's Xid lines.
type GPUEvent struct {
	Time    time.Time `json:"time"` // when Next returned it
	Type    string    `json:"type"` // one of the GPUEvent* types
	Xid     uint64    `json:"xid,omitempty"`
	GPUUUID string    `json:"gpu_uuid,omitempty"`
	// GPUInstanceID and ComputeInstanceID name the MIG instance an event is
	// of; nil for the whole GPU.
	GPUInstanceID     *uint32 `json:"gpu_instance_id,omitempty"`
	ComputeInstanceID *uint32 `json:"compute_instance_id,omitempty"`
}

// The types of GPUEvent.
const (
	GPUEventXid          = "xid"            // EventTypeXidCriticalError; Xid holds the number
	GPUEventECCDoubleBit = "ecc_double_bit" // an uncorrectable ECC error
	GPUEventECCSingleBit = "ecc_single_bit" // a corrected ECC error
	GPUEventGPULost      = "gpu_lost"       // the wait answered GPU_IS_LOST: no GPU's events can be trusted now
)

// gpuEventMask is what NVIDIA's k8s-device-plugin watches for its health
// checks: critical Xids and ECC errors. Each GPU registers the part of it
// the GPU supports.
const gpuEventMask = nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError | nvml.EventTypeSingleBitEccError

// ErrNoGPUEvent is Next's answer when the timeout passed without an event.
var ErrNoGPUEvent = errors.New("no GPU event before the timeout")

// GPUEvents waits for NVML's events of every GPU. It is the reader a
// long-running watcher polls; it is not yet wired into gpusnap watch.
type GPUEvents struct {
	lib nvml.Interface
	set nvml.EventSet
	// Unwatched names, by GPU (UUID, or devices[i] where the UUID could not
	// be read), why its events are not watched.
	Unwatched map[string]string
}

// WatchGPUEvents initializes lib and registers every GPU's supported Xid and
// ECC events in one event set. MIG instances are not registered apart: their
// events come through their GPU, with the instance ids set. It makes no call
// after a failed Init (a call then kills the process in the dynamic linker).
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
		name := deviceKey(i)
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
		}
	}
	return e, nil
}

// Next waits up to timeout for the next event. ErrNoGPUEvent says none
// came; a lost GPU is an event of its own (GPUEventGPULost), as the device
// plugin marks every GPU unhealthy then.
func (e *GPUEvents) Next(timeout time.Duration) (GPUEvent, error) {
	data, ret := e.set.Wait(uint32(min(timeout.Milliseconds(), math.MaxUint32)))
	ev := GPUEvent{Time: time.Now()}
	switch ret {
	case nvml.SUCCESS:
	case nvml.ERROR_TIMEOUT:
		return ev, ErrNoGPUEvent
	case nvml.ERROR_GPU_IS_LOST:
		ev.Type = GPUEventGPULost
		return ev, nil
	default:
		return ev, fmt.Errorf("nvml event wait: %s", nvmlReason(ret))
	}
	switch data.EventType {
	case nvml.EventTypeXidCriticalError:
		ev.Type, ev.Xid = GPUEventXid, data.EventData
	case nvml.EventTypeDoubleBitEccError:
		ev.Type = GPUEventECCDoubleBit
	case nvml.EventTypeSingleBitEccError:
		ev.Type = GPUEventECCSingleBit
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

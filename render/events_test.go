package render

import (
	"strings"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/eventlog"
)

// events says what NVML reported of a GPU in words, MIG instance included.
func TestEventLineGPUEvents(t *testing.T) {
	gi, ci := uint32(1), uint32(0)
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		e    eventlog.Event
		want string
	}{
		{eventlog.Event{Time: at, Kind: eventlog.KindGPUEvent, Source: eventlog.SourceNVML, GPUEvent: eventlog.GPUEventXid, Xid: 79, GPUUUID: "GPU-0"},
			"gpu_event nvml Xid 79 on GPU-0"},
		{eventlog.Event{Time: at, Kind: eventlog.KindGPUEvent, Source: eventlog.SourceNVML, GPUEvent: eventlog.GPUEventECCDoubleBit, GPUUUID: "GPU-1", GPUInstanceID: &gi, ComputeInstanceID: &ci},
			"gpu_event nvml double-bit (uncorrectable) ECC error on GPU-1 (MIG GPU instance 1, compute instance 0)"},
		{eventlog.Event{Time: at, Kind: eventlog.KindGPUEvent, Source: eventlog.SourceNVML, GPUEvent: eventlog.GPUEventGPULost, Note: "its GPU events are not watched after this"},
			"gpu_event nvml GPU lost on a GPU NVML did not name (its GPU events are not watched after this)"},
	} {
		if got := EventLine(&tc.e); !strings.HasSuffix(got, tc.want) {
			t.Errorf("EventLine = %q, want it to end in %q", got, tc.want)
		}
	}
}

// TestEventsText: a heartbeat is left out, a hostile comm cannot break its
// line, and a figure NVML did not report prints as "-".
func TestEventsText(t *testing.T) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	events := []eventlog.Event{
		{Time: at, Kind: eventlog.KindAlive},
		{Time: at, Kind: "open", Process: &eventlog.Process{PID: 7, StartTime: 9, Comm: "x\nforged\x1b[2J", UID: 1000}},
	}
	var b strings.Builder
	if err := EventsText(&b, events); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); strings.Count(out, "\n") != 1 || !strings.Contains(out, " open 7@9 (x\\nforged\\x1b[2J, uid 1000)") {
		t.Errorf("events text:\n%q", out)
	}
	b.Reset()
	series := []eventlog.UtilSeries{{GPU: "GPU-0", Samples: []eventlog.UtilSample{
		{Time: at, SM: 97, Mem: -1, UsedMiB: 1024, Listed: 1, Processes: []eventlog.UtilProcSample{{PID: 7, StartTime: 9, SM: 97, Mem: 3}}}}}}
	if err := UtilTable(&b, series); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "TIME ") || !strings.HasSuffix(lines[1], "  GPU-0  97   -     1024      1       7@9 97/3") {
		t.Errorf("util table:\n%s", b.String())
	}
}

package ocsf

import (
	"strconv"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/eventlog"
)

// FromEvents renders what watch recorded, one Detection Finding an event
// titled watch_KIND. Heartbeats are left out, since they say only that watch
// ran. line is the event's one-line text, the message. A GPU event the
// driver raised (an Xid, an uncorrectable ECC error, a GPU lost) is high,
// events the kernel dropped are low, and the rest are informational, since
// diff judges them.
func FromEvents(evs []eventlog.Event, src Source, line func(*eventlog.Event) string) []Finding {
	var out []Finding
	for i := range evs {
		e := &evs[i]
		if e.Kind == eventlog.KindAlive {
			continue
		}
		sev := diff.Info
		switch e.Kind {
		case eventlog.KindGPUEvent:
			sev = diff.Medium
			if e.GPUEvent != eventlog.GPUEventECCSingleBit {
				sev = diff.High
			}
		case eventlog.KindLost:
			sev = diff.Low
		}
		var dev string
		if e.Device != nil {
			dev = e.Device.Path
		}
		var proc string
		if e.Process != nil {
			proc = e.Process.Key()
		}
		// An event is its own identity, so its time joins the tuple.
		o := newFinding(src, "watch_"+e.Kind, line(e), sev, e.Time, proc+"/"+e.Time.UTC().String(), dev, e.GPUUUID)
		o.IsAlert = sev >= diff.Medium
		ev := Evidence{Data: map[string]any{"event": e}}
		if p := e.Process; p != nil {
			ev.Process = &Process{PID: p.PID, UID: p.Key(), Name: p.Comm, File: exeFile(p.Exe, ""), User: &User{UID: strconv.Itoa(p.UID)}}
			o.Resources = append(o.Resources, attribution(p.PodUID, p.SlurmJobID, p.ContainerID)...)
		}
		if d := e.Device; d != nil {
			ev.File = deviceFile(d.Path)
			switch d.Type {
			case "char":
				ev.File.TypeID, ev.File.Type = 3, "Character Device"
			case "block":
				ev.File.TypeID, ev.File.Type = 4, "Block Device"
			}
		}
		o.Evidences = []Evidence{ev}
		out = append(out, o)
	}
	return out
}

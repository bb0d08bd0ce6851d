package render

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/internal/safetext"
	"github.com/gpusnap/gpusnap/snapshot"
)

// EventsText writes events one a line, as events prints them. Heartbeats
// are left out, as they are for coverage and --json, not for a reader.
func EventsText(w io.Writer, events []eventlog.Event) error {
	for i := range events {
		if events[i].Kind == eventlog.KindAlive {
			continue
		}
		if _, err := fmt.Fprintln(w, EventLine(&events[i])); err != nil {
			return err
		}
	}
	return nil
}

// UtilTable writes watch's utilization samples, one line a sample of each
// GPU, as events --util prints them.
func UtilTable(w io.Writer, series []eventlog.UtilSeries) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tGPU\tSM%\tMEM%\tUSED MiB\tLISTED\tPROCESSES (PID@START SM%/MEM%)")
	figure := func(n int64) string {
		if n < 0 {
			return "-"
		}
		return strconv.FormatInt(n, 10)
	}
	for _, s := range series {
		for _, smp := range s.Samples {
			procs := make([]string, 0, len(smp.Processes))
			for _, p := range smp.Processes {
				procs = append(procs, fmt.Sprintf("%d@%d %d/%d", p.PID, p.StartTime, p.SM, p.Mem))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", smp.Time.Local().Format("2006-01-02T15:04:05.000Z07:00"), safetext.Line(s.GPU),
				figure(int64(smp.SM)), figure(int64(smp.Mem)), figure(smp.UsedMiB), figure(int64(smp.Listed)), strings.Join(procs, ", "))
		}
	}
	return tw.Flush()
}

// EventLine writes an event on one line, escaped for the terminal, as
// events prints it and an OCSF finding of an event says it.
func EventLine(e *eventlog.Event) string {
	parts := []string{e.Time.Local().Format("2006-01-02T15:04:05.000000Z07:00"), e.Kind}
	if e.Source != "" {
		parts = append(parts, e.Source)
	}
	if p := e.Process; p != nil {
		who := []string{p.Comm}
		if p.Exe != "" {
			who = append(who, snapshot.ExeText(p.Exe, p.ExeDeleted))
		}
		who = append(who, fmt.Sprintf("uid %d", p.UID))
		if p.NSPID != 0 {
			who = append(who, fmt.Sprintf("pid %d in its namespace", p.NSPID))
		}
		who = append(who, snapshot.AttributionText(p.ContainerID, p.PodUID, p.SlurmJobID)...)
		parts = append(parts, p.Key(), "("+strings.Join(who, ", ")+")")
	}
	if d := e.Device; d != nil {
		parts = append(parts, d.Path)
		if d.Number != "" {
			parts = append(parts, d.Number)
		}
	}
	for _, f := range []string{e.Access, e.Perms} {
		if f != "" {
			parts = append(parts, f)
		}
	}
	if e.Length > 0 {
		parts = append(parts, fmt.Sprintf("%d bytes", e.Length))
	}
	if e.Child != nil {
		parts = append(parts, "child "+e.Child.Key())
	}
	if e.Util != nil {
		parts = append(parts, fmt.Sprintf("%s: %d samples, %d processes (gpusnap events --util)", e.Util.GPU, e.Util.Len(), len(e.Util.Procs)))
	}
	if e.Kind == eventlog.KindGPUEvent {
		parts = append(parts, e.GPUEventText())
	} else if e.GPUUUID != "" {
		parts = append(parts, e.GPUUUID)
	}
	if e.Mode != "" {
		parts = append(parts, "mode "+e.Mode)
	}
	if e.Lost > 0 {
		parts = append(parts, fmt.Sprintf("%d lost", e.Lost))
	}
	if e.Note != "" {
		parts = append(parts, "("+e.Note+")")
	}
	return safetext.Line(strings.Join(parts, " "))
}

package render

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/gpusnap/gpusnap/internal/safetext"
	"github.com/gpusnap/gpusnap/snapshot"
)

// SnapshotSummary writes what show prints of a snapshot, what an operator
// looks at first. Every string a process chose (comm, exe, paths) is
// escaped for the terminal.
func SnapshotSummary(w io.Writer, s *snapshot.Snapshot) error {
	e := safetext.Escape
	h := s.Host
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "id\t%s\n", s.ID)
	fmt.Fprintf(tw, "label\t%s\n", e(s.Label))
	fmt.Fprintf(tw, "tenant\t%s\n", orDash(e(s.Tenant)))
	fmt.Fprintf(tw, "host\t%s (kernel %s, boot %s)\n", orDash(e(h.Hostname)), orDash(e(h.KernelRelease)), orDash(e(h.BootID)))
	fmt.Fprintf(tw, "captured\t%s, in %s, by gpusnap %s from %s\n", h.CaptureStart.Local().Format(time.RFC3339),
		h.CaptureEnd.Sub(h.CaptureStart).Round(time.Millisecond), e(h.GpusnapVersion), e(h.ProcRoot))
	fmt.Fprintf(tw, "processes\t%d read, %d vanished, %d refused\n", s.Scan.ProcessesRead, s.Scan.Vanished, s.Scan.Refused)
	nv := s.NVML
	switch {
	case nv.Unavailable != "":
		fmt.Fprintf(tw, "nvml\t%s: %s\n", e(nv.Source), e(nv.Unavailable))
	default:
		fmt.Fprintf(tw, "nvml\t%s: driver %s, %d GPUs\n", e(nv.Source), e(nv.DriverVersion), len(nv.Devices))
	}
	for _, d := range nv.Devices {
		mem := "memory not reported"
		if d.Memory != nil {
			mem = fmt.Sprintf("%d MiB of %d MiB used", d.Memory.Used>>20, d.Memory.Total>>20)
		}
		fmt.Fprintf(tw, "  gpu %d\t%s %s, %s, %d compute processes\n", d.Index, e(d.UUID), e(d.Name), mem, len(d.ComputeProcesses))
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	var users []*snapshot.Process
	for i := range s.Processes {
		if s.Processes[i].UsesNVIDIA() {
			users = append(users, &s.Processes[i])
		}
	}
	fmt.Fprintf(w, "\n%d processes use an NVIDIA device\n", len(users))
	if len(users) == 0 {
		return nil
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PID\tUSER\tCOMM\tEXE\tMAPPINGS\tHOLDERS")
	for _, p := range users {
		exe := snapshot.ExeText(e(p.Exe), p.ExeDeleted)
		user := p.User
		if user == "" {
			user = fmt.Sprint(p.UID)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\n", p.PID, e(user), e(p.Comm), orDash(exe), len(p.Mappings), len(p.Holders))
	}
	return tw.Flush()
}

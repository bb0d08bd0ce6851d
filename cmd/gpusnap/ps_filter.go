package main

import (
	"fmt"
	"io"
	"os"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/gpusnap/gpusnap/render"
	"github.com/gpusnap/gpusnap/snapshot"
)

// psFilter is what ps -p and --gpu narrow a sample to. With both given, a
// process must pass both.
type psFilter struct {
	PIDs []int            // -p, nil for every process
	GPUs *snapshot.GPUSet // --gpu, nil for every GPU
}

// apply narrows rep to the processes and GPUs asked for, and says, one
// line each, what was asked for and not found. ps never answers a question
// about one process or GPU with silence.
func (f psFilter) apply(rep *psReport, snap *snapshot.Snapshot) (notes []string) {
	if f.GPUs != nil {
		kept, uses := f.GPUs.Select(rep.GPUs)
		rep.GPUs = kept
		rep.Processes = slices.DeleteFunc(rep.Processes, func(p render.PsProcess) bool { return !uses(&p.Process) })
		if len(rep.Processes) == 0 {
			notes = append(notes, fmt.Sprintf("no process that could be read uses GPU %s", f.GPUs))
		}
	}
	if f.PIDs == nil {
		return notes
	}
	asked := func(pid int) bool { return slices.Contains(f.PIDs, pid) }
	rep.Processes = slices.DeleteFunc(rep.Processes, func(p render.PsProcess) bool { return !asked(p.PID) })
	// Each GPU kept lists only the processes asked for. The table reads
	// its figures from the GPUs whole, so these are copies.
	var gpus []snapshot.GPUUse
	for _, gu := range rep.GPUs {
		gu.Processes = slices.DeleteFunc(slices.Clone(gu.Processes), func(u snapshot.GPUProcessUse) bool { return !asked(u.PID) })
		gu.Unlisted = slices.DeleteFunc(slices.Clone(gu.Unlisted), func(u snapshot.DeviceUser) bool { return !asked(u.PID) })
		if len(gu.Processes)+len(gu.Unlisted) > 0 {
			gpus = append(gpus, gu)
		}
	}
	rep.GPUs = gpus
	for _, pid := range f.PIDs {
		if slices.ContainsFunc(rep.Processes, func(p render.PsProcess) bool { return p.PID == pid }) {
			continue
		}
		switch {
		case !slices.ContainsFunc(snap.Processes, func(p snapshot.Process) bool { return p.PID == pid }):
			notes = append(notes, fmt.Sprintf("pid %d: no such process", pid))
		case f.GPUs != nil:
			notes = append(notes, fmt.Sprintf("pid %d uses no GPU of %s", pid, f.GPUs))
		default:
			notes = append(notes, fmt.Sprintf("pid %d uses no GPU (NVML lists it on none, and it holds and maps no NVIDIA device)", pid))
		}
	}
	return notes
}

// isTerminal reports whether w is a terminal. ps --interval redraws one in
// place and appends to anything else (a pipe, a file, a test's buffer).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

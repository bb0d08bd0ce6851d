package render

import (
	"cmp"
	"fmt"
	"io"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/internal/safetext"
	"github.com/gpusnap/gpusnap/snapshot"
)

// psTableWidth is what ps's table fits without --wide, a terminal of 120
// columns, with the last column cut to what is left.
const psTableWidth = 120

// PsProcess is a process of ps's report with its triage verdict.
type PsProcess struct {
	snapshot.Process
	Triage diff.Triage `json:"triage"`
}

// psGPUFigures are what NVML says of one process across its GPUs, their
// indexes, its memory on them and its highest SM utilization.
type psGPUFigures struct {
	gpus []string
	mem  *uint64
	sm   *uint32
}

// psColumn is one column of ps's table. It gives its header, the most it
// shows without --wide (0 never cuts), whether only --wide shows it, and its
// value for a row.
type psColumn struct {
	head  string
	width int
	wide  bool
	value func(r psRow) string
}

// psRow is one process with what the table needs beside it.
type psRow struct {
	PsProcess
	gpu psGPUFigures
	now time.Time // the capture's time, as STARTED shows a clock time within a day of it
}

var psColumns = []psColumn{
	{"PID", 0, false, func(r psRow) string { return strconv.Itoa(r.PID) }},
	{"PPID", 0, false, func(r psRow) string { return strconv.Itoa(r.PPID) }},
	{"STARTED", 0, false, psStarted},
	{"S", 0, false, func(r psRow) string { return orDash(r.State) }},
	{"USER", 8, false, func(r psRow) string { return psUser(r.Process) }},
	{"CLASS", 0, false, func(r psRow) string { return r.Triage.Class }},
	{"GPU", 7, false, psGPUs},
	{"GPU MEM", 0, false, func(r psRow) string {
		if r.gpu.mem == nil {
			return "-"
		}
		return humanSize(*r.gpu.mem)
	}},
	{"SM%", 0, false, func(r psRow) string {
		if r.gpu.sm == nil {
			return "-"
		}
		return strconv.FormatUint(uint64(*r.gpu.sm), 10)
	}},
	{"CONN", 0, false, psConnections},
	{"OWNER", 16, false, psOwner},
	{"HOLDERS", 0, true, func(r psRow) string { return psHolders(r.Holders) }},
	{"MAPPINGS", 0, true, func(r psRow) string { return psMappings(r.Process) }},
	{"PACKAGE", 0, true, psPackage},
	{"SHA256", 0, true, func(r psRow) string { return orDash(r.ExeSHA256) }},
	{"COMMAND", -1, false, psCommandLine}, // last, cut to what the width leaves
}

// PsTable prints one row per process, the columns cut to fit
// psTableWidth (a cut value ends in "…") unless wide, where every column is
// shown whole. Every process-controlled string (comm, exe, paths, unit
// names) is escaped, so a hostile name cannot forge rows or drive the
// terminal. A suspect's row is followed by a why line naming the evidence.
func PsTable(w io.Writer, procs []PsProcess, gpus []snapshot.GPUUse, now time.Time, wide bool) error {
	figures := psFigures(gpus)
	var cols []psColumn
	for _, c := range psColumns {
		if wide || !c.wide {
			cols = append(cols, c)
		}
	}
	cells := make([][]string, len(procs))
	widths := make([]int, len(cols))
	for i, c := range cols {
		widths[i] = utf8.RuneCountInString(c.head)
	}
	for r, pp := range procs {
		row := psRow{PsProcess: pp, gpu: figures[pp.Key()], now: now}
		for i, c := range cols {
			v := c.value(row)
			if !wide && c.width > 0 {
				v = cutText(v, c.width)
			}
			cells[r] = append(cells[r], v)
			widths[i] = max(widths[i], utf8.RuneCountInString(v))
		}
	}
	if last := len(cols) - 1; !wide {
		used := 0
		for _, n := range widths[:last] {
			used += n + 1
		}
		widths[last] = max(psTableWidth-used, utf8.RuneCountInString(cols[last].head))
	}
	var out strings.Builder
	heads := make([]string, len(cols))
	for i, c := range cols {
		heads[i] = c.head
	}
	psLine(&out, heads, widths, wide)
	for r, pp := range procs {
		psLine(&out, cells[r], widths, wide)
		if c := pp.Triage.Class; c == diff.ClassSuspectedCompromise || c == diff.ClassUnkillable {
			fmt.Fprintf(&out, "  why: %s; next: %s\n", safetext.Escape(strings.Join(pp.Triage.Why, "; ")), safetext.Escape(pp.Triage.Next))
		}
	}
	_, err := io.WriteString(w, out.String())
	return err
}

// psLine writes one row, each cell padded to its column's width and one
// space, as ps(1) does, the last cut to its width unless wide.
func psLine(out *strings.Builder, cells []string, widths []int, wide bool) {
	last := len(cells) - 1
	for i, v := range cells[:last] {
		out.WriteString(v + strings.Repeat(" ", widths[i]-utf8.RuneCountInString(v)+1))
	}
	v := cells[last]
	if !wide {
		v = cutText(v, widths[last])
	}
	out.WriteString(v + "\n")
}

// cutText cuts s to n runes, the last of them "…" where it was cut.
func cutText(s string, n int) string {
	if utf8.RuneCountInString(s) <= n || n < 1 {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// psFigures sums, per process (PID@START), what NVML lists of it on each
// GPU, and names the GPUs it holds or maps without being listed.
func psFigures(gpus []snapshot.GPUUse) map[string]psGPUFigures {
	out := map[string]psGPUFigures{}
	for _, gu := range gpus {
		idx := strconv.Itoa(gu.Index)
		for _, u := range gu.Processes {
			if u.Process == nil {
				continue
			}
			f := out[u.Process.Key()]
			f.gpus = append(f.gpus, idx)
			if u.UsedGPUMemory != nil {
				f.mem = addSize(f.mem, *u.UsedGPUMemory)
			}
			if u.Utilization != nil && (f.sm == nil || *f.sm < u.Utilization.SMUtil) {
				f.sm = &u.Utilization.SMUtil
			}
			out[u.Process.Key()] = f
		}
		for _, u := range gu.Unlisted {
			if u.Process != nil {
				f := out[u.Process.Key()]
				f.gpus = append(f.gpus, idx)
				out[u.Process.Key()] = f
			}
		}
	}
	return out
}

func addSize(sum *uint64, n uint64) *uint64 {
	v := n
	if sum != nil {
		v += *sum
	}
	return &v
}

// psGPUs is the GPU column, the NVML indexes of the GPUs the process is
// listed on, holds or maps. Where NVML did not place it, the column shows
// "#N" for each /dev/nvidiaN it holds or maps (NVML minor number N).
func psGPUs(r psRow) string {
	if len(r.gpu.gpus) > 0 {
		return strings.Join(r.gpu.gpus, ",")
	}
	var minors []int
	for _, m := range r.Mappings {
		if m.GPUMinor != nil {
			minors = append(minors, *m.GPUMinor)
		}
	}
	for _, h := range r.Holders {
		if h.GPUMinor != nil {
			minors = append(minors, *h.GPUMinor)
		}
	}
	slices.Sort(minors)
	var out []string
	for _, n := range slices.Compact(minors) {
		out = append(out, "#"+strconv.Itoa(n))
	}
	return orDash(strings.Join(append(out, accelNodes(r.Process)...), ","))
}

// accelNodes names in the GPU column the accelerator nodes other than
// NVIDIA's that the process works on, each DRM client's node with device
// memory or engine time ("renderD128"), and "kfd".
func accelNodes(p snapshot.Process) []string {
	var out []string
	for _, c := range p.DRMClients {
		if c.Working() {
			out = append(out, path.Base(c.Node))
		}
	}
	for _, h := range p.Holders {
		if snapshot.AccelNodeKind(h.Target, h.DeviceNumber, snapshot.DeviceNumber{}) == snapshot.NodeKFD {
			out = append(out, "kfd")
			break
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// psStarted is the STARTED column, the clock time for a process started
// within a day of the capture, else its date, as ps(1)'s STIME.
func psStarted(r psRow) string {
	switch {
	case r.Started.IsZero():
		return "-"
	case r.now.Sub(r.Started) < 24*time.Hour:
		return r.Started.Local().Format("15:04:05")
	}
	return r.Started.Local().Format("Jan02")
}

// psConnections is the CONN column, the peers it talks to (ps lists GPU
// users, whose sockets the capture reads). It is "-" where they could not
// be read or were not (a defunct process holds none).
func psConnections(r psRow) string {
	if r.Defunct() || slices.ContainsFunc(r.Errors, func(e string) bool { return strings.HasPrefix(e, "sockets:") }) {
		return "-"
	}
	n := 0
	for _, s := range r.Sockets {
		if s.Peer() {
			n++
		}
	}
	return strconv.Itoa(n)
}

// psOwner is the OWNER column, the unit, Slurm job, pod or container.
func psOwner(r psRow) string {
	owner := psContainer(r.Process)
	if u := r.SystemdUnit; u != "" && owner == "-" {
		owner = safetext.Escape(u)
		if r.UnitRestart != "" && r.UnitRestart != "no" {
			owner += " (Restart=" + safetext.Escape(r.UnitRestart) + ")"
		}
	}
	return owner
}

// psPackage is the PACKAGE column, "name (status)" or the status alone.
func psPackage(r psRow) string {
	if r.Package == nil {
		return "-"
	}
	return strings.TrimPrefix(safetext.Escape(r.Package.Name)+" ("+r.Package.Status+")", " ")
}

// psCommandLine is the COMMAND column, comm then exe, marked "!" where there
// is masquerade evidence (an exe in a staging or hidden directory or
// deleted, a comm not its exe's or named like a kernel thread). The why
// line under the suspect says which.
func psCommandLine(r psRow) string {
	cmd := cmp.Or(strings.Join(slices.DeleteFunc([]string{psComm(r.Process), psExe(r.Process)}, func(s string) bool { return s == "-" }), " "), "-")
	if len(diff.Masquerade(&r.Process)) > 0 {
		return "!" + cmd
	}
	return cmd
}

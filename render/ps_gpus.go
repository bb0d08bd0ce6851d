package render

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/gpusnap/gpusnap/internal/safetext"
	"github.com/gpusnap/gpusnap/snapshot"
)

// Pod names a pod by namespace, name and UID ("" where not known).
type Pod struct{ Namespace, Name, UID string }

// PodAllocations is the kubelet's word on which pod was given which GPU, as
// ps prints it. Render takes it as an interface so that it links no
// kubelet code.
type PodAllocations interface {
	// GivenTo names the pods given g.
	GivenTo(g *snapshot.GPUUse) []Pod
	// Outside reports whether the pod of podUID uses g outside what it was
	// given, and whether that is known.
	Outside(podUID string, g *snapshot.GPUUse) (outside, known bool)
	// Named is the pod of uid, and false where the kubelet gave it no GPU.
	Named(uid string) (Pod, bool)
}

// PsLastLine is what ps says last on stderr. It says that ps found
// nothing, and what it could not read (processes unreadable or hidden from
// /proc, a scan that did not settle, which check and diff fail on), so that
// a run that read nothing never reads as an all-clear. It is "" when ps
// found processes and read every one.
func PsLastLine(found int, scan snapshot.Scan) string {
	var parts []string
	if found == 0 {
		parts = append(parts, "no process that could be read maps or holds an NVIDIA device")
	}
	if scan.Unreadable > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d processes could not be read (maps or fds): what they use is unknown", scan.Unreadable, scan.ProcessesRead))
	}
	if n := len(scan.Hidden); n > 0 {
		parts = append(parts, fmt.Sprintf("%d hidden from /proc (a mount over /proc/PID): what they use is unknown", n))
	}
	if scan.Unsettled != "" {
		parts = append(parts, "the scan did not settle, so a process that keeps changing its PID may not have been read: "+safetext.Escape(scan.Unsettled))
	}
	if len(parts) == 0 {
		return ""
	}
	return "gpusnap: " + strings.Join(parts, "; ")
}

// PsGPUs prints, per GPU, memory used and what no listed process accounts
// for, the processes NVML lists with their memory and utilization, and the
// processes that hold or map its /dev/nvidiaN without being listed.
// alloc, where not nil, adds the pods given each GPU.
func PsGPUs(w io.Writer, gpus []snapshot.GPUUse, alloc PodAllocations) {
	for i := range gpus {
		gu := gpus[i]
		node := "-"
		if gu.MinorNumber != nil {
			node = "/dev/nvidia" + strconv.Itoa(*gu.MinorNumber)
		}
		fmt.Fprintf(w, "\nGPU %d  %s  %s  %s\n", gu.Index, orDash(safetext.Escape(gu.UUID)), orDash(safetext.Escape(gu.Name)), node)
		fmt.Fprintf(w, "  memory: %s\n", psGPUMemory(gu.Memory, gu.Unaccounted))
		if gu.AccountingMode == snapshot.AccountingDisabled {
			fmt.Fprintf(w, "  accounting: disabled: a process that uses this GPU and exits between two snapshots leaves no NVML record (turn it on, as root: nvidia-smi -i %d -am 1)\n", gu.Index)
		}
		for _, m := range gu.MIG {
			fmt.Fprintf(w, "  MIG %d/%d %s: %s\n", m.GPUInstanceID, m.ComputeInstanceID, orDash(safetext.Escape(m.UUID)), psGPUMemory(m.Memory, m.Unaccounted))
		}
		if len(gu.Processes) > 0 {
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "  PID\tTYPE\tGPU MEMORY\tSM%\tMEM%\tMIG\tUSER\tCOMM\tEXE")
			for _, p := range gu.Processes {
				fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\n", p.PID, p.Types, psGPUProcessNumbers(p), psMIG(p), psListedWho(p))
			}
			_ = tw.Flush() // w is the command's stdout, whose errors PsTable reported
		}
		for _, u := range gu.Unlisted {
			fmt.Fprintf(w, "  not listed by NVML: %d %s %s holders %s mappings %s\n", u.PID, psUser(*u.Process),
				psComm(*u.Process), psHolders(u.Holders), psMappings(snapshot.Process{Mappings: u.Mappings}))
		}
		if alloc != nil {
			printPsPods(w, &gpus[i], alloc)
		}
	}
}

// printPsPods prints the pods given the GPU, then every process of another
// pod that uses it (listed by NVML, holding or mapping its node).
func printPsPods(w io.Writer, gu *snapshot.GPUUse, alloc PodAllocations) {
	var given []string
	for _, p := range alloc.GivenTo(gu) {
		given = append(given, psPod(p))
	}
	if len(given) == 0 {
		given = []string{"no pod"}
	}
	fmt.Fprintf(w, "  allocated to: %s\n", strings.Join(given, ", "))
	var users []*snapshot.Process
	for _, p := range gu.Processes {
		users = append(users, p.Process)
	}
	for _, u := range gu.Unlisted {
		users = append(users, u.Process)
	}
	for _, p := range users {
		if p == nil || p.PodUID == "" {
			continue
		}
		if outside, _ := alloc.Outside(p.PodUID, gu); outside {
			fmt.Fprintf(w, "  OUTSIDE ALLOCATION: %d %s of pod %s uses this GPU\n", p.PID, psComm(*p), psPodUID(p.PodUID, alloc))
		}
	}
}

// psPod is "namespace/name (uid)".
func psPod(p Pod) string {
	return safetext.Escape(p.Namespace+"/"+p.Name) + " (" + orDash(safetext.Escape(p.UID)) + ")"
}

// psPodUID names a pod by its UID, and by name where the kubelet listed it.
func psPodUID(uid string, alloc PodAllocations) string {
	if p, ok := alloc.Named(uid); ok {
		return psPod(p)
	}
	return safetext.Escape(uid) + " (given no GPU)"
}

// psGPUMemory is "62.0GiB used of 79.6GiB, 2.0GiB unaccounted".
func psGPUMemory(m *snapshot.Memory, unaccounted *uint64) string {
	if m == nil {
		return "not reported"
	}
	s := humanSize(m.Used) + " used of " + humanSize(m.Total)
	if unaccounted != nil {
		return s + ", " + humanSize(*unaccounted) + " unaccounted"
	}
	return s + ", unaccounted unknown"
}

// psGPUProcessNumbers are the GPU MEMORY, SM% and MEM% columns.
func psGPUProcessNumbers(p snapshot.GPUProcessUse) string {
	mem, sm, mu := "n/a", "-", "-"
	if p.UsedGPUMemory != nil {
		mem = humanSize(*p.UsedGPUMemory)
	}
	if p.Utilization != nil {
		sm, mu = strconv.FormatUint(uint64(p.Utilization.SMUtil), 10), strconv.FormatUint(uint64(p.Utilization.MemUtil), 10)
	}
	return mem + "\t" + sm + "\t" + mu
}

// psMIG is the GPU/compute instance a process runs in, "1/0".
func psMIG(p snapshot.GPUProcessUse) string {
	if p.GPUInstanceID == nil {
		return "-"
	}
	ci := "-"
	if p.ComputeInstanceID != nil {
		ci = strconv.FormatUint(uint64(*p.ComputeInstanceID), 10)
	}
	return strconv.FormatUint(uint64(*p.GPUInstanceID), 10) + "/" + ci
}

// psListedWho are the USER, COMM and EXE columns of a listed PID.
func psListedWho(p snapshot.GPUProcessUse) string {
	switch {
	case p.Process != nil:
		return psUser(*p.Process) + "\t" + psComm(*p.Process) + "\t" + psExe(*p.Process)
	case p.Join == snapshot.JoinAmbiguous:
		return "-\t(PID in several pid namespaces)\t-"
	default:
		return "-\t(no live process: orphan)\t-"
	}
}

// psComm is the COMM column. A defunct process's name is followed by
// <defunct>, as ps(1) shows it. NVML's PID of one is an orphan.
func psComm(p snapshot.Process) string {
	c := orDash(safetext.Escape(p.Comm))
	if p.Defunct() {
		c += " <defunct>"
	}
	return c
}

func psUser(p snapshot.Process) string {
	u := strconv.Itoa(p.UID)
	if p.User != "" {
		u = safetext.Escape(p.User)
	}
	if p.EUID != p.UID {
		u += "(euid " + strconv.Itoa(p.EUID) + ")"
	}
	return u
}

func psExe(p snapshot.Process) string {
	if p.Exe == "" {
		return "-"
	}
	return snapshot.ExeText(safetext.Escape(p.Exe), p.ExeDeleted)
}

// psContainer names who runs the process by container, pod or Slurm job.
func psContainer(p snapshot.Process) string {
	var parts []string
	if p.ContainerID != "" {
		id := p.ContainerID[:min(12, len(p.ContainerID))]
		if p.ContainerRuntime != "" {
			id = p.ContainerRuntime + ":" + id
		}
		parts = append(parts, id)
	}
	if p.PodUID != "" {
		parts = append(parts, "pod:"+p.PodUID)
	}
	if p.SlurmJobID != "" {
		parts = append(parts, "slurm:"+p.SlurmJobID)
	}
	return orDash(safetext.Escape(strings.Join(parts, " ")))
}

// psHolders lists fds as "3:/dev/nvidia0(rw)". The fds of one target and
// access fold into one entry, "/dev/nvidia0(rw) x20", since a CUDA process
// holds its GPU's node through a score of them (--json keeps every fd
// number).
func psHolders(hs []snapshot.Holder) string {
	var order []string
	fds := map[string][]int{}
	for _, h := range hs {
		s := safetext.Escape(h.Target)
		if h.Deleted {
			s += " (deleted)"
		}
		if h.Access != "" {
			s += "(" + h.Access + ")"
		}
		if fds[s] == nil {
			order = append(order, s)
		}
		fds[s] = append(fds[s], h.FD)
	}
	parts := make([]string, len(order))
	for i, s := range order {
		if n := len(fds[s]); n > 1 {
			parts[i] = s + " x" + strconv.Itoa(n)
		} else {
			parts[i] = strconv.Itoa(fds[s][0]) + ":" + s
		}
	}
	return orDash(strings.Join(parts, " "))
}

// psMappings folds the mappings of one path and permissions into one entry,
// "/dev/nvidia0 rw-s x12 24.0MiB", since a CUDA process maps a device many
// times.
func psMappings(p snapshot.Process) string {
	type key struct{ path, perms string }
	var order []key
	count := map[key]int{}
	size := map[key]uint64{}
	add := func(k key, sz uint64) {
		if count[k] == 0 {
			order = append(order, k)
		}
		count[k]++
		size[k] += sz
	}
	for _, m := range p.Mappings {
		path := safetext.Escape(m.Path)
		if m.Deleted {
			path += " (deleted)"
		}
		add(key{path, m.Perms}, m.Size)
	}
	for _, m := range p.SuspectAnon {
		add(key{"anon-exec", m.Perms}, m.Size)
	}
	var parts []string
	for _, k := range order {
		s := k.path + " " + k.perms
		if count[k] > 1 {
			s += " x" + strconv.Itoa(count[k])
		}
		parts = append(parts, s+" "+humanSize(size[k]))
	}
	return orDash(strings.Join(parts, ", "))
}

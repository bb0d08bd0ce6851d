package diff

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/kmsg"
	"github.com/gpusnap/gpusnap/snapshot"
)

// KindXidError means the kernel or NVML reported an NVIDIA Xid in the window.
const KindXidError = "xid_error"

var _ = register(&Rule{
	Kind: KindXidError, Title: "NVIDIA Xid error",
	Severities: []Severity{Medium, High},
	ByPID:      true,
	compare:    []func(*comparison) []Finding{xidErrors},
	Order:      130,
})

// KindForgedKernelMessage is a kernel-log record in the driver's words that the kernel did not write.
const KindForgedKernelMessage = "forged_kernel_message"

var _ = register(&Rule{
	Kind: KindForgedKernelMessage, Title: "Forged kernel message",
	Severities: []Severity{High},
	compare:    []func(*comparison) []Finding{forgedKernelMessages},
	Order:      140,
})

// xidCatalog names the Xids an operator meets most, after NVIDIA's Xid
// catalog (docs.nvidia.com/deploy/xid-errors). down marks those after which
// the GPU or its memory is not usable until a GPU reset or a reboot, where
// the catalog's immediate action is RESET_GPU or RESTART_BM or the memory
// lost a page or row. Those are high, and every other Xid is medium.
var xidCatalog = map[int]struct {
	name string
	down bool
}{
	13:  {"graphics engine exception", false},
	31:  {"GPU memory page fault", false},
	43:  {"GPU stopped processing (the channel was reset)", false},
	45:  {"preemptive cleanup, after a previous error", false},
	46:  {"GPU stopped processing", true},
	48:  {"double-bit ECC error", true},
	61:  {"internal micro-controller breakpoint", true},
	62:  {"internal micro-controller halt", true},
	63:  {"ECC page retirement or row remapping recorded", true},
	64:  {"ECC page retirement or row remapping failed", true},
	68:  {"video processor exception", false},
	74:  {"NVLink error", true},
	79:  {"GPU has fallen off the bus", true},
	92:  {"high single-bit ECC error rate", true},
	94:  {"contained ECC error", true},
	95:  {"uncontained ECC error", true},
	109: {"context switch timeout", false},
	119: {"GSP RPC timeout", true},
	120: {"GSP error", true},
	140: {"unrecovered ECC error", true},
	154: {"GPU recovery action changed", true},
}

// maxXidEvidence bounds the records quoted in one finding, and the rest are counted.
const maxXidEvidence = 64

// maxXidProcesses bounds the findings of one Xid number on one device. The
// first processes blamed each have one, and the records blaming any other
// are one more finding, with counts, its first and last time and its first
// maxXidOverflowEvidence records (a tenant can raise Xids by the hundred
// thousand, each under a new PID).
const (
	maxXidProcesses        = 8
	maxXidOverflowEvidence = 8
)

// nvmlXidTolerance is how far apart in time an Xid NVML delivered and the
// kernel log's record of the same Xid on the same GPU may be and still be
// one error. The record's time is the boot time (whole seconds) plus its
// microseconds, and the event's is when the watch's wait returned.
const nvmlXidTolerance = 5 * time.Second

// xidGroup is the records of one Xid number on one device blamed on one
// PID, and the Xid events NVML delivered of the same error.
type xidGroup struct {
	xid     kmsg.Xid
	records []*kmsg.Record
	times   []time.Time // the records' times, sorted (kernelXid)
	nvml    []*eventlog.Event
	// others counts, in the group of the records past maxXidProcesses
	// processes, the processes they blame. It is 0 in a group of one PID.
	others int
}

// nvmlXidGroup is NVML's events of one Xid number on one GPU that no
// kernel-log record matched.
type nvmlXidGroup struct {
	uuid   string
	xid    uint64
	events []*eventlog.Event
}

// xidErrors reports an NVIDIA Xid or NVSwitch SXid that the kernel logged
// between FROM and TO, or that NVML delivered to watch. It raises one finding
// per Xid, device and PID from the kernel's own records (see
// forgedKernelMessages). An NVML event matching a record within
// nvmlXidTolerance joins it, and one matching none is a finding of its own.
func xidErrors(c *comparison) []Finding {
	var groups []*xidGroup
	index := map[string]*xidGroup{}    // by device and PID
	perDevice := map[string]int{}      // groups of one PID, by Xid number and device
	overflow := map[string]*xidGroup{} // the rest, by Xid number and device
	if w := c.opts.KernelLog; w != nil {
		for i := range w.Records {
			r := &w.Records[i]
			if !r.FromKernel() {
				continue
			}
			x, ok := kmsg.ParseXid(r.Text)
			if !ok {
				continue
			}
			device := fmt.Sprintf("%v/%d/%s", x.Switch, x.Number, normalPCI(x.PCI))
			key := device + "/" + strconv.Itoa(x.PID)
			g := index[key]
			switch {
			case g != nil:
			case perDevice[device] < maxXidProcesses:
				perDevice[device]++
				g = &xidGroup{xid: x}
				groups = append(groups, g)
			default:
				if g = overflow[device]; g == nil {
					g = &xidGroup{xid: x}
					overflow[device] = g
					groups = append(groups, g)
				}
				g.others++
			}
			index[key] = g
			g.records = append(g.records, r)
		}
	}
	var alone []*nvmlXidGroup
	aloneIndex := map[string]*nvmlXidGroup{}
	for _, e := range c.windowGPUEvents(eventlog.GPUEventXid) {
		if g := c.kernelXid(groups, e); g != nil {
			g.nvml = append(g.nvml, e)
			continue
		}
		key := fmt.Sprintf("%s/%d", e.GPUUUID, e.Xid)
		g := aloneIndex[key]
		if g == nil {
			g = &nvmlXidGroup{uuid: e.GPUUUID, xid: e.Xid}
			aloneIndex[key] = g
			alone = append(alone, g)
		}
		g.events = append(g.events, e)
	}
	out := make([]Finding, 0, len(groups)+len(alone))
	for _, g := range groups {
		out = append(out, c.xidFinding(g))
	}
	for _, g := range alone {
		out = append(out, c.nvmlXidFinding(g))
	}
	return out
}

// windowGPUEvents are the event log's gpu_events of a type between FROM and
// the window's end.
func (c *comparison) windowGPUEvents(typ string) []*eventlog.Event {
	if c.opts.Events == nil {
		return nil
	}
	var out []*eventlog.Event
	c.eachEvent(func(e *eventlog.Event) {
		if e.Kind == eventlog.KindGPUEvent && e.GPUEvent == typ &&
			!e.Time.Before(c.from.Host.CaptureStart) && e.Time.Before(c.windowEnd()) {
			out = append(out, e)
		}
	})
	return out
}

// kernelXid is the group of kernel-log records of the Xid NVML delivered in
// e. They have the same number on the GPU with e's UUID (its PCI bus id
// joined to NVML's view, as for a record alone), logged within
// nvmlXidTolerance of e (at any time in the window where the boot time is
// unknown).
func (c *comparison) kernelXid(groups []*xidGroup, e *eventlog.Event) *xidGroup {
	for _, g := range groups {
		if g.xid.Switch || uint64(g.xid.Number) != e.Xid {
			continue
		}
		if gpu := c.gpuByPCI(g.xid.PCI); gpu == nil || gpu.UUID != e.GPUUUID {
			continue
		}
		if g.times == nil {
			g.times = make([]time.Time, 0, len(g.records))
			for _, r := range g.records {
				if at := c.recordTime(r); at != nil {
					g.times = append(g.times, *at)
				}
			}
			slices.SortFunc(g.times, time.Time.Compare)
		}
		if len(g.times) == 0 {
			return g // the boot time is unknown, so any time in the window
		}
		// A tenant can raise thousands of Xids, each in both sources, so this searches rather than scans.
		i, _ := slices.BinarySearchFunc(g.times, e.Time.Add(-nvmlXidTolerance), time.Time.Compare)
		if i < len(g.times) && !g.times[i].After(e.Time.Add(nvmlXidTolerance)) {
			return g
		}
	}
	return nil
}

// xidSeverity is an Xid's name in the catalog and its severity.
func xidSeverity(number int) (string, Severity) {
	e, ok := xidCatalog[number]
	switch {
	case !ok:
		return "see the driver's text", Medium
	case e.down:
		return e.name, High
	}
	return e.name, Medium
}

func (c *comparison) xidFinding(g *xidGroup) Finding {
	x, first := g.xid, g.records[0]
	at := c.recordTime(first)
	f := Finding{Kind: KindXidError, Severity: Medium, Time: at}
	var what, device string
	if x.Switch {
		verdict := "non-fatal"
		if x.Fatal {
			verdict, f.Severity = "fatal", High
		}
		what = fmt.Sprintf("SXid %d (%s) on NVSwitch PCI:%s", x.Number, verdict, x.PCI)
	} else {
		var name string
		name, f.Severity = xidSeverity(x.Number)
		gpu := c.gpuByPCI(x.PCI)
		device = "GPU PCI:" + x.PCI
		if gpu != nil {
			f.GPUUUID = gpu.UUID
			device = fmt.Sprintf("GPU %d %s (PCI:%s)", gpu.Index, gpu.UUID, x.PCI)
		}
		what = fmt.Sprintf("Xid %d (%s) on %s", x.Number, name, device)
	}
	quoted := maxXidEvidence
	if g.others > 0 {
		quoted = maxXidOverflowEvidence
	}
	f.Evidence = append(f.Evidence, xidRecordEvidence(g.records, quoted)...)
	f.Evidence = append(f.Evidence, nvmlXidEvidence(g.nvml, "NVML delivered the same Xid to gpusnap watch")...)
	if !x.Switch && f.GPUUUID == "" {
		f.Evidence = append(f.Evidence, fmt.Sprintf("no GPU with PCI bus id %s in NVML's view at TO or FROM", x.PCI))
	}
	blame := ""
	switch {
	case g.others > 0:
		blame = fmt.Sprintf(", blamed on %d more processes, past the first %d with findings of their own", g.others, maxXidProcesses)
	case x.PID > 0:
		f.Process, blame = c.xidProcess(x, at, &f.Evidence)
	}
	when := "at an unknown time"
	if at != nil {
		when = "at " + at.UTC().Format(time.RFC3339)
	}
	f.Summary = fmt.Sprintf("%s %s%s", what, when, blame)
	n := len(g.records)
	last := c.recordTime(g.records[n-1])
	switch {
	case g.others > 0 && last != nil:
		f.Summary += fmt.Sprintf(" (%d records, the last at %s)", n, last.UTC().Format(time.RFC3339))
	case n > 1:
		f.Summary += fmt.Sprintf(" (%d records)", n)
	}
	return f
}

// nvmlXidFinding is an Xid NVML delivered that no kernel-log record of the
// window matched. The kernel log is then silent on it, and the finding says
// why where it can (a note says what of it was not read).
func (c *comparison) nvmlXidFinding(g *nvmlXidGroup) Finding {
	name, sev := xidSeverity(int(g.xid))
	first := g.events[0]
	at := first.Time
	device := "GPU " + g.uuid
	if gpu := c.gpuByUUID(g.uuid); gpu != nil {
		device = fmt.Sprintf("GPU %d %s (PCI:%s)", gpu.Index, gpu.UUID, gpu.PCIBusID)
	}
	f := Finding{Kind: KindXidError, Severity: sev, Time: &at, GPUUUID: g.uuid,
		Summary: fmt.Sprintf("Xid %d (%s) on %s at %s, from NVML's events: the kernel log of the window has no record of it",
			g.xid, name, device, at.UTC().Format(time.RFC3339))}
	if n := len(g.events); n > 1 {
		f.Summary += fmt.Sprintf(" (%d events)", n)
	}
	f.Evidence = nvmlXidEvidence(g.events, "NVML delivered the Xid to gpusnap watch")
	switch w := c.opts.KernelLog; {
	case w == nil:
		f.Evidence = append(f.Evidence, "the kernel log of the window was not read")
	case len(w.Missing) > 0:
		f.Evidence = append(f.Evidence, "the kernel log of the window is not whole: "+w.Missing[0])
	default:
		f.Evidence = append(f.Evidence, "the kernel log of the window holds no record of this Xid on this GPU: no process is named, as NVML's events name none")
	}
	return f
}

// nvmlXidEvidence quotes NVML's Xid events, up to maxXidEvidence of them.
func nvmlXidEvidence(events []*eventlog.Event, said string) []string {
	var out []string
	for i, e := range events {
		if i == maxXidEvidence {
			out = append(out, fmt.Sprintf("... %d more NVML events", len(events)-i))
			break
		}
		out = append(out, fmt.Sprintf("%s at %s: %s (event log)", said, e.Time.UTC().Format(time.RFC3339Nano), e.GPUEventText()))
	}
	return out
}

// xidProcess names the process the driver blamed. That is the process with that
// PID in TO, FROM or the tenant's snapshots between them that had started by
// the time of the record (a later process with the PID is another one), else
// the PID and the name the driver gave.
func (c *comparison) xidProcess(x kmsg.Xid, at *time.Time, evidence *[]string) (*ProcessRef, string) {
	candidates := []*snapshot.Process{c.toByPID[x.PID], c.fromByPID[x.PID]}
	for _, h := range c.opts.History {
		for i := range h.Processes {
			if h.Processes[i].PID == x.PID {
				candidates = append(candidates, &h.Processes[i])
			}
		}
	}
	for _, p := range candidates {
		if p == nil {
			continue
		}
		// btime has whole seconds, so a process started within a second after the record may still be it.
		if at != nil && !p.Started.IsZero() && p.Started.After(at.Add(time.Second)) {
			*evidence = append(*evidence, fmt.Sprintf("PID %d is now %s (%s), started %s, after the Xid: another process", x.PID, p.Key(), p.Comm, p.Started.UTC().Format(time.RFC3339)))
			continue
		}
		ref := processRef(p)
		if x.Name != "" && x.Name != p.Comm {
			*evidence = append(*evidence, fmt.Sprintf("the driver named the process %q; its comm is %q", x.Name, p.Comm))
		}
		state := "alive at TO"
		if c.toByKey[idOf(p.PID, p.StartTime)] == nil {
			state = "gone at TO"
		}
		return ref, fmt.Sprintf(", blamed on %s, %s", describe(ref), state)
	}
	ref := &ProcessRef{PID: x.PID, Comm: x.Name, UID: -1}
	*evidence = append(*evidence, fmt.Sprintf("PID %d is in no snapshot of the window: the process had exited by TO", x.PID))
	return ref, fmt.Sprintf(", blamed on pid %d (%s, gone at TO)", x.PID, cmp.Or(x.Name, "name not given"))
}

// xidRecordEvidence quotes the records, up to n of them.
func xidRecordEvidence(records []*kmsg.Record, n int) []string {
	out := make([]string, 0, min(len(records), n)+1)
	for i, r := range records {
		if i == n {
			out = append(out, fmt.Sprintf("... %d more records", len(records)-i))
			break
		}
		out = append(out, strings.TrimSuffix(r.Line(), "\n"))
	}
	return out
}

// forgedKernelMessages reports a record in the NVIDIA driver's words that the
// kernel did not write (facility not kern). User space wrote it to
// /dev/kmsg, to stage an Xid or to bury a real one. It never counts as an
// Xid. One finding per distinct text.
func forgedKernelMessages(c *comparison) []Finding {
	w := c.opts.KernelLog
	if w == nil {
		return nil
	}
	var out []Finding
	byText := map[string]int{}
	for i := range w.Records {
		r := &w.Records[i]
		if r.FromKernel() || !kmsg.IsDriverText(r.Text) {
			continue
		}
		if k, seen := byText[r.Text]; seen {
			f := &out[k]
			if len(f.Evidence) < maxXidEvidence {
				f.Evidence = append(f.Evidence, strings.TrimSuffix(r.Line(), "\n"))
			}
			continue
		}
		byText[r.Text] = len(out)
		out = append(out, Finding{
			Kind:     KindForgedKernelMessage,
			Severity: High,
			Time:     c.recordTime(r),
			Summary: fmt.Sprintf("a kernel-log record in the NVIDIA driver's words came from user space (facility %d, not kern 0): %s",
				r.Facility, clipText(r.Text, 160)),
			Evidence: []string{strings.TrimSuffix(r.Line(), "\n"),
				"the kernel gives every record written to /dev/kmsg from user space a facility other than 0; only the driver's own records have 0"},
		})
	}
	return out
}

// recordTime is when the kernel logged r, TO's boot time plus the record's
// microseconds since boot (to the second of btime). It is nil where the boot
// time is unknown.
func (c *comparison) recordTime(r *kmsg.Record) *time.Time {
	boot := c.to.Host.BootTime
	if boot.IsZero() {
		return nil
	}
	t := boot.Add(time.Duration(r.USec) * time.Microsecond)
	return &t
}

// gpuByUUID finds the GPU of a UUID in NVML's view at TO, else at FROM.
func (c *comparison) gpuByUUID(uuid string) *snapshot.GPU {
	for _, nv := range []*snapshot.NVML{&c.to.NVML, &c.from.NVML} {
		for i := range nv.Devices {
			if nv.Devices[i].UUID == uuid {
				return &nv.Devices[i]
			}
		}
	}
	return nil
}

// gpuByPCI finds the GPU of a bus id as the driver prints it (0000:3b:00) in
// NVML's view (00000000:3B:00.0) at TO, else at FROM.
func (c *comparison) gpuByPCI(bus string) *snapshot.GPU {
	want := normalPCI(bus)
	for _, nv := range []*snapshot.NVML{&c.to.NVML, &c.from.NVML} {
		for i := range nv.Devices {
			if normalPCI(nv.Devices[i].PCIBusID) == want {
				return &nv.Devices[i]
			}
		}
	}
	return nil
}

// normalPCI reduces a PCI address to domain:bus:device in lower-case hex
// without leading zeros, the function dropped. Xid lines give no function,
// NVML gives one, and the GPU is function 0.
func normalPCI(addr string) string {
	addr, _, _ = strings.Cut(addr, ".")
	parts := strings.Split(addr, ":")
	if len(parts) != 3 {
		return strings.ToLower(addr)
	}
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 16, 32)
		if err != nil {
			return strings.ToLower(addr)
		}
		parts[i] = strconv.FormatUint(n, 16)
	}
	return strings.Join(parts, ":")
}

// clipText bounds a tenant-written text quoted in a summary line.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// noteKernelLog says what of the window's kernel log was not read.
func (c *comparison) noteKernelLog() {
	w := c.opts.KernelLog
	if w == nil {
		if c.to.KernelLog != nil {
			c.notCompared("kernel log: the records " + c.window() + " were not read: Xid errors are not checked")
		}
		return
	}
	for _, m := range w.Missing {
		c.notCompared("kernel log: " + m)
	}
}

// noteGPUEvents says where gpusnap watch did not see NVML's GPU events in
// the window, for a GPU lost (its events after that were not watched) or a
// failing wait (the kernel log's Xids, where it was read, still count).
func (c *comparison) noteGPUEvents() {
	for _, e := range c.windowGPUEvents(eventlog.GPUEventGPULost) {
		c.notCompared(fmt.Sprintf("NVML events: NVML answered gpusnap watch at %s that a GPU is lost (%s): NVML's Xid and ECC events after it were not watched",
			e.Time.UTC().Format(time.RFC3339), e.GPUEventText()))
	}
	if c.opts.Events == nil {
		return
	}
	saidOff := map[string]bool{}
	c.eachEvent(func(e *eventlog.Event) {
		if e.Time.Before(c.from.Host.CaptureStart) || !e.Time.Before(c.windowEnd()) {
			return
		}
		switch {
		case e.Kind == eventlog.KindLost && e.Source == eventlog.SourceNVML:
			c.notCompared(fmt.Sprintf("NVML events: at %s gpusnap watch could not read them (%s): an Xid or ECC error NVML reported then is not known", e.Time.UTC().Format(time.RFC3339), e.Note))
		case e.GPUEventsOff != "" && !saidOff[e.GPUEventsOff]:
			// A heartbeat or stop of a watch whose NVML events stopped
			// before the window is said once per reason.
			saidOff[e.GPUEventsOff] = true
			c.notCompared(fmt.Sprintf("NVML events: at %s gpusnap watch was not reading them (%s): an Xid or ECC error NVML reported in the window is not known", e.Time.UTC().Format(time.RFC3339), e.GPUEventsOff))
		}
	})
}

// window names the stretch of the kernel log judged. A diff's lies between
// its two captures, and a check's is its --window before the capture.
func (c *comparison) window() string {
	if c.check {
		return "of the window before the capture"
	}
	return "between FROM and TO"
}

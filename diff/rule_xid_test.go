package diff

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/kmsg"
	"github.com/gpusnap/gpusnap/snapshot"
)

// window is a kernel-log window of records given as /dev/kmsg lines.
func window(t *testing.T, lines ...string) *kmsg.Window {
	t.Helper()
	w := &kmsg.Window{Source: "test"}
	for _, l := range lines {
		r, err := kmsg.Parse([]byte(l), nil)
		if err != nil {
			t.Fatal(err)
		}
		w.Records = append(w.Records, r)
	}
	return w
}

// xidHosts are FROM and TO on one boot at t0 - 1h, GPU 0 at PCI 00000000:3B:00.0.
func xidHosts(toProcs ...snapshot.Process) (from, to *snapshot.Snapshot) {
	boot := t0.Add(-time.Hour)
	g := gpu(0)
	g.PCIBusID = "00000000:3B:00.0"
	from, to = withGPUs(snap("a"), g), withGPUs(snap("b", toProcs...), g)
	from.Host.BootTime, to.Host.BootTime = boot, boot
	return from, to
}

func TestXidSeverityAndJoin(t *testing.T) {
	tenant := proc(4242, 100, "python3", "/usr/bin/python3.11")
	tenant.Started = t0.Add(-50 * time.Minute)
	from, to := xidHosts(tenant)
	w := window(t,
		"4,10,600000000,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python3, GPU has fallen off the bus.",
		"4,11,600000100,-;NVRM: Xid (PCI:0000:3b:00): 13, pid=4242, name=python3, Graphics Exception: ESR 0x504648=0x1000e",
		"4,12,600000200,-;NVRM: Xid (PCI:0000:3b:00): 13, pid=4242, name=python3, Graphics Exception: ESR 0x504650=0x0",
		"4,13,600000300,-;NVRM: Xid (PCI:0000:3b:00): 999, pid=4242, name=python3, a number no catalog lists",
		"4,14,600000400,-;nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 11004, Non-fatal, Ingress invalid ACL",
		"6,15,600000500,-;NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15",
	)
	r := Compare(from, to, Options{KernelLog: w})
	expect(t, r, "xid_error high 4242", "xid_error medium 0", "xid_error medium 4242", "xid_error medium 4242")
	f := r.Findings[0]
	wantTime := t0.Add(-time.Hour + 600*time.Second)
	if f.GPUUUID != "GPU-0" || f.Process.StartTime != 100 || f.Time == nil || !f.Time.Equal(wantTime) ||
		!strings.Contains(f.Summary, "Xid 79 (GPU has fallen off the bus) on GPU 0 GPU-0 (PCI:0000:3b:00)") ||
		!strings.Contains(f.Summary, "blamed on pid 4242 (python3") || !strings.Contains(f.Summary, "alive at TO") {
		t.Errorf("Xid 79: %+v (time %v)", f, f.Time)
	}
	for _, f := range r.Findings {
		if strings.HasPrefix(f.Summary, "Xid 13 ") && (len(f.Evidence) != 2 || !strings.Contains(f.Summary, "(2 records)")) {
			t.Errorf("two Xid 13 records, one finding: %+v", f)
		}
	}
	if len(r.Notes) != 0 {
		t.Errorf("a complete window: notes %q", r.Notes)
	}
}

// The PID the driver blamed belongs to another process at TO when that one
// started after the record, so the finding keeps the driver's PID and name.
func TestXidPIDReused(t *testing.T) {
	later := proc(4242, 900000, "bash", "/usr/bin/bash")
	later.Started = t0.Add(-time.Minute)
	from, to := xidHosts(later)
	w := window(t, "4,10,600000000,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python3, GPU has fallen off the bus.")
	r := Compare(from, to, Options{KernelLog: w})
	expect(t, r, "xid_error high 4242")
	f := r.Findings[0]
	if f.Process.StartTime != 0 || f.Process.Comm != "python3" || f.Process.UID != -1 ||
		!strings.Contains(strings.Join(f.Evidence, "\n"), "after the Xid: another process") || !r.WantsHistory() {
		t.Errorf("reused PID joined: %+v", f)
	}
}

// User space can write the driver's words to /dev/kmsg. The kernel marks
// them with a facility other than kern, and they are forged, never an Xid.
func TestForgedKernelMessage(t *testing.T) {
	from, to := xidHosts()
	w := window(t,
		"12,10,600000000,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=systemd, GPU has fallen off the bus.",
		"12,11,600000001,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=systemd, GPU has fallen off the bus.",
		"30,12,600000002,-;nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 30 LTSSM Fault Up",
		"14,13,600000003,-;sshd[1]: Accepted publickey for bob",
	)
	r := Compare(from, to, Options{KernelLog: w})
	expect(t, r, "forged_kernel_message high 0", "forged_kernel_message high 0")
	if len(r.Findings[0].Evidence) != 3 {
		t.Errorf("a repeated forged text is one finding with every record: %q", r.Findings[0].Evidence)
	}
}

func TestKernelLogNotes(t *testing.T) {
	from, to := xidHosts()
	to.KernelLog = &snapshot.KernelLogPosition{Source: "/dev/kmsg", Next: 5}
	r := Compare(from, to, Options{})
	// Not read is not compared, so the verdict may not call the window clean.
	if len(r.Notes) != 1 || !strings.Contains(r.Notes[0], "Xid errors are not checked") || r.Complete {
		t.Errorf("window not read: notes %q, complete %v", r.Notes, r.Complete)
	}
	w := &kmsg.Window{Missing: []string{"records 5 to 9 were overwritten before they were read (the kernel's ring wrapped)"}}
	r = Compare(from, to, Options{KernelLog: w})
	if len(r.Notes) != 1 || r.Notes[0] != "kernel log: "+w.Missing[0] || r.Complete {
		t.Errorf("wrapped ring: notes %q, complete %v", r.Notes, r.Complete)
	}
	if r = Compare(from, to, Options{KernelLog: &kmsg.Window{}}); !r.Complete {
		t.Errorf("the window read whole: notes %q, complete %v", r.Notes, r.Complete)
	}
}

func TestNormalPCI(t *testing.T) {
	for _, tc := range [][2]string{{"0000:3b:00", "00000000:3B:00.0"}, {"0000:07:00.0", "00000000:07:00.0"}} {
		if normalPCI(tc[0]) != normalPCI(tc[1]) {
			t.Errorf("%s and %s differ: %s, %s", tc[0], tc[1], normalPCI(tc[0]), normalPCI(tc[1]))
		}
	}
	if normalPCI("0000:3b:00") == normalPCI("0000:3c:00") {
		t.Error("two buses are one")
	}
}

// nvmlXid is the Xid NVML delivered to gpusnap watch at (seconds after
// boot) on GPU-0, as the event log holds it.
func nvmlXid(after time.Duration, number uint64) eventlog.Event {
	return eventlog.Event{Time: t0.Add(-time.Hour + after), Kind: eventlog.KindGPUEvent, Source: eventlog.SourceNVML,
		GPUEvent: eventlog.GPUEventXid, Xid: number, GPUUUID: "GPU-0"}
}

// nvmlHosts are xidHosts whose window runs from the boot to t0, with the
// GPU events the watch recorded in it.
func nvmlHosts(events ...eventlog.Event) (from, to *snapshot.Snapshot, opts Options) {
	from, to = xidHosts()
	from.Host.CaptureStart = t0.Add(-time.Hour)
	return from, to, Options{Events: &eventlog.ReadResult{Events: events}}
}

// The kernel log's Xid 79 and NVML's event of it 1.5 s later are one
// finding with both as evidence. NVML's Xid 79 of a minute later, and its
// Xid 31 the kernel did not log, are findings of their own.
func TestXidNVMLJoinsKernelLog(t *testing.T) {
	from, to, opts := nvmlHosts(nvmlXid(601500*time.Millisecond, 79), nvmlXid(660*time.Second, 79), nvmlXid(700*time.Second, 31),
		eventlog.Event{Time: t0.Add(-50 * time.Minute), Kind: eventlog.KindGPUEvent, GPUEvent: eventlog.GPUEventECCDoubleBit, GPUUUID: "GPU-0"})
	opts.KernelLog = window(t, "4,10,600000000,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python3, GPU has fallen off the bus.")
	r := Compare(from, to, opts)
	expect(t, r, "xid_error high 0", "xid_error high 4242", "xid_error medium 0")
	var joined, alone Finding
	for _, f := range r.Findings {
		switch {
		case f.Process != nil:
			joined = f
		case strings.HasPrefix(f.Summary, "Xid 79 "):
			alone = f
		}
	}
	ev := strings.Join(joined.Evidence, "\n")
	if !strings.Contains(ev, "NVRM: Xid (PCI:0000:3b:00): 79") || !strings.Contains(ev, "NVML delivered the same Xid to gpusnap watch at "+t0.Add(-time.Hour+601500*time.Millisecond).Format(time.RFC3339Nano)+": Xid 79 on GPU-0") {
		t.Errorf("the kernel's Xid 79 with NVML's: %q", joined.Evidence)
	}
	if alone.GPUUUID != "GPU-0" || alone.Time == nil || !alone.Time.Equal(t0.Add(-time.Hour+660*time.Second)) ||
		!strings.Contains(alone.Summary, "Xid 79 (GPU has fallen off the bus) on GPU 0 GPU-0 (PCI:00000000:3B:00.0)") ||
		!strings.Contains(strings.Join(alone.Evidence, "\n"), "the kernel log of the window holds no record of this Xid on this GPU") {
		t.Errorf("NVML's Xid 79 a minute later: %+v", alone)
	}
}

// Where the kernel log of the window is missing (the ring wrapped, another
// boot, unread), NVML's Xid still raises xid_error and says why it stands alone.
func TestXidNVMLAloneWhereKernelLogIsMissing(t *testing.T) {
	from, to, opts := nvmlHosts(nvmlXid(600*time.Second, 79))
	opts.KernelLog = &kmsg.Window{Missing: []string{"records 5 to 9 were overwritten before they were read (the kernel's ring wrapped)"}}
	r := Compare(from, to, opts)
	expect(t, r, "xid_error high 0")
	if f := r.Findings[0]; !strings.Contains(strings.Join(f.Evidence, "\n"), "the kernel log of the window is not whole: records 5 to 9 were overwritten") {
		t.Errorf("evidence %q", f.Evidence)
	}
	opts.KernelLog = nil
	if r := Compare(from, to, opts); len(r.Findings) != 1 || !strings.Contains(strings.Join(r.Findings[0].Evidence, "\n"), "the kernel log of the window was not read") {
		t.Errorf("kernel log unread: %+v", r.Findings)
	}
	// An event outside the window is another window's.
	from, to, opts = nvmlHosts(eventlog.Event{Time: t0.Add(time.Minute), Kind: eventlog.KindGPUEvent, GPUEvent: eventlog.GPUEventXid, Xid: 79, GPUUUID: "GPU-0"})
	if r := Compare(from, to, opts); len(r.Findings) != 0 {
		t.Errorf("an Xid after TO: %+v", r.Findings)
	}
}

// A GPU lost in the window, and a wait for NVML's events that failed, are
// notes, as NVML's events then were not watched. Neither counts as events the
// kernel dropped.
func TestGPUEventsNotes(t *testing.T) {
	from, to, opts := nvmlHosts(eventlog.Event{Time: t0.Add(-10 * time.Minute), Kind: eventlog.KindGPUEvent, GPUEvent: eventlog.GPUEventGPULost},
		eventlog.Event{Time: t0.Add(-20 * time.Minute), Kind: eventlog.KindLost, Source: eventlog.SourceNVML, Note: "NVML's GPU events: nvml event wait: unknown error"})
	opts.KernelLog = &kmsg.Window{}
	r := Compare(from, to, opts)
	notes := strings.Join(r.Notes, "\n")
	if !strings.Contains(notes, "that a GPU is lost (GPU lost on a GPU NVML did not name)") ||
		!strings.Contains(notes, "could not read them (NVML's GPU events: nvml event wait: unknown error)") ||
		strings.Contains(notes, "the kernel dropped") || r.Complete {
		t.Errorf("notes %q, complete %v", r.Notes, r.Complete)
	}
}

// A watch whose NVML events stopped before the window (a GPU lost in an
// earlier one) says so in every heartbeat. The window is noted, once per
// reason, and not complete. A heartbeat with the events read says nothing.
func TestGPUEventsOffBeforeTheWindow(t *testing.T) {
	const why = "NVML answered at 2026-11-29T18:00:00Z that a GPU is lost"
	alive := func(at time.Duration, off string) eventlog.Event {
		return eventlog.Event{Time: t0.Add(at), Kind: eventlog.KindAlive, Mode: "tracepoint", GPUEventsOff: off}
	}
	from, to, opts := nvmlHosts(alive(-50*time.Minute, why), alive(-49*time.Minute, why), alive(-48*time.Minute, ""))
	opts.KernelLog = &kmsg.Window{}
	r := Compare(from, to, opts)
	notes := strings.Join(r.Notes, "\n")
	if strings.Count(notes, "was not reading them ("+why+")") != 1 || r.Complete {
		t.Errorf("notes %q, complete %v", r.Notes, r.Complete)
	}
	from, to, opts = nvmlHosts(alive(-50*time.Minute, ""))
	opts.KernelLog = &kmsg.Window{}
	if r := Compare(from, to, opts); strings.Contains(strings.Join(r.Notes, "\n"), "was not reading them") {
		t.Errorf("heartbeats with NVML's events read: notes %q", r.Notes)
	}
}

// In TestXidManyProcessesCapped 30 records of Xid 13 on one GPU each blame
// another PID. The first maxXidProcesses PIDs have a finding each, and the
// rest are one finding with no process that counts them and says when they
// ran.
func TestXidManyProcessesCapped(t *testing.T) {
	from, to := xidHosts()
	var lines []string
	for i := range 30 {
		lines = append(lines, fmt.Sprintf("4,%d,%d,-;NVRM: Xid (PCI:0000:3b:00): 13, pid=%d, name=w, Graphics Exception", 10+i, 600000000+i*1000000, 5000+i))
	}
	r := Compare(from, to, Options{KernelLog: window(t, lines...)})
	var perPID, rest int
	for _, f := range r.Findings {
		switch {
		case f.Kind != KindXidError:
			t.Errorf("%s: %s", f.Kind, f.Summary)
		case f.Process != nil:
			perPID++
		default:
			rest++
			if !strings.Contains(f.Summary, "blamed on 22 more processes") || !strings.Contains(f.Summary, "(22 records, the last at 2026-11-29T19:10:29Z)") ||
				len(f.Evidence) != maxXidOverflowEvidence+1 || !strings.Contains(f.Evidence[0], "pid=5008") {
				t.Errorf("the rest: %s %q", f.Summary, f.Evidence)
			}
		}
	}
	if perPID != maxXidProcesses || rest != 1 {
		t.Errorf("%d findings of one PID and %d of the rest, want %d and 1", perPID, rest, maxXidProcesses)
	}
}

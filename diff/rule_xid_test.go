package diff

import (
	"strings"
	"testing"
	"time"

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
// started after the record: the finding keeps the driver's PID and name.
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

// User space can write the driver's words to /dev/kmsg; the kernel marks
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
	to.KernelLog = &kmsg.Position{Source: "/dev/kmsg", Next: 5}
	r := Compare(from, to, Options{})
	// Not read is not compared: the verdict may not call the window clean.
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

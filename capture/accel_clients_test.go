package capture

import (
	"context"
	"testing"
)

// The AMD host's fixtures: its sysfs as the kernel lays it out (class/drm
// links into the PCI function; KFD's topology and per-process VRAM), and a
// proc root whose ROCm worker 5150 holds /dev/kfd and the render node
// through two fds of one DRM client (amdgpu's fdinfo), beside a browser
// 6300 idle on the render node.
const (
	sysFixture     = "../fixtures/sys/amdhost"
	amdProcFixture = "../fixtures/proc/amdhost"
)

// With a sys root, a capture records the accelerators and each process's
// DRM clients, one per client id; without one (a fixture proc root alone)
// it records neither, as before.
func TestCaptureAccelerators(t *testing.T) {
	root := amdProcFixture
	s, err := Capture(context.Background(), Options{ProcRoot: root, SysRoot: sysFixture})
	if err != nil {
		t.Fatal(err)
	}
	a := s.Accelerators
	if a == nil || len(a.Devices) != 1 || a.Devices[0].Vendor != "amd" || a.Devices[0].KFDGPUID != 4711 || len(a.KFDProcesses) != 2 {
		t.Fatalf("accelerators: %+v", a)
	}
	p := findPID(t, s, 5150)
	if len(p.DRMClients) != 1 {
		t.Fatalf("drm clients: %+v", p.DRMClients)
	}
	c := p.DRMClients[0]
	if c.ClientID != 12 || c.Node != "/dev/dri/renderD128" || len(c.FDs) != 2 || c.DeviceMemory() != 1<<30 || !c.Busy() {
		t.Errorf("client: %+v", c)
	}
	for _, h := range p.Holders {
		if h.Access != "rw" {
			t.Errorf("holder %d %s: access %q, want rw from its fdinfo", h.FD, h.Target, h.Access)
		}
	}
	if xorg := findPID(t, s, 6000); len(xorg.DRMClients) != 0 || xorg.Holders[0].Access != "rw" {
		t.Errorf("card0 holder: %+v, clients %+v", xorg.Holders, xorg.DRMClients)
	}
	if b := findPID(t, s, 6300); len(b.DRMClients) != 1 || b.DRMClients[0].Working() || b.AcceleratorWork(a) || !p.AcceleratorWork(a) {
		t.Errorf("browser's client %+v: idle, no accelerator work", b.DRMClients)
	}

	s, err = Capture(context.Background(), Options{ProcRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	if s.Accelerators != nil || len(findPID(t, s, 5150).DRMClients) != 0 || findPID(t, s, 5150).Holders[0].Access != "" {
		t.Errorf("a capture with no sys root read accelerators: %+v", s.Accelerators)
	}
}

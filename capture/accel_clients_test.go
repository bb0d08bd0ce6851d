package capture

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const sysFixture = "../fixtures/sys/amdhost"

// rocmWorker adds process 5150 to a copy of the fixture proc root: a ROCm
// worker holding /dev/kfd and the render node twice (a dup'ed fd: one DRM
// client), whose fdinfo is amdgpu's.
func rocmWorker(t *testing.T) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "proc")
	if out, err := exec.Command("cp", "-a", fixtureRoot, root).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	dir := filepath.Join(root, "5150")
	if out, err := exec.Command("cp", "-a", filepath.Join(root, "6000"), dir).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	stat, _ := os.ReadFile(filepath.Join(dir, "stat"))
	files := map[string]string{
		"stat":     strings.Replace(strings.Replace(string(stat), "6000 (srun_task)", "5150 (python3)", 1), " 6000 6000 ", " 5150 5150 ", 1),
		"comm":     "python3\n",
		"maps":     "7f0000000000-7f0000001000 rw-s 00000000 00:05 77 /dev/kfd\n7f1000000000-7f1000100000 rw-s 00000000 00:05 78 /dev/dri/renderD128\n",
		"fdinfo/3": "pos:\t0\nflags:\t02100002\nmnt_id:\t25\nino:\t77\n",
		"fdinfo/4": "pos:\t0\nflags:\t02100002\nmnt_id:\t25\nino:\t78\ndrm-driver:\tamdgpu\ndrm-client-id:\t12\ndrm-pdev:\t0000:03:00.0\ndrm-total-vram:\t1048576 KiB\ndrm-resident-vram:\t1048576 KiB\ndrm-total-gtt:\t2048 KiB\ndrm-engine-gfx:\t987654 ns\n",
	}
	files["fdinfo/5"] = files["fdinfo/4"]
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.Remove(filepath.Join(dir, "fd", "3"))
	for fd, target := range map[string]string{"3": "/dev/kfd", "4": "/dev/dri/renderD128", "5": "/dev/dri/renderD128"} {
		if err := os.Symlink(target, filepath.Join(dir, "fd", fd)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// With a sys root, a capture records the accelerators and each process's
// DRM clients, one per client id; without one (a fixture proc root alone)
// it records neither, as before.
func TestCaptureAccelerators(t *testing.T) {
	root := rocmWorker(t)
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

	s, err = Capture(context.Background(), Options{ProcRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	if s.Accelerators != nil || len(findPID(t, s, 5150).DRMClients) != 0 || findPID(t, s, 5150).Holders[0].Access != "" {
		t.Errorf("a capture with no sys root read accelerators: %+v", s.Accelerators)
	}
}

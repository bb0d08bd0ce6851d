package snapshot_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpusnap/gpusnap/internal/livetest"
)

// TestLiveLowAddressMapping: a device mapped below 0x10000000 (as a 32-bit
// process or a MAP_FIXED mapping places it) shows in maps with zero padding,
// "00200000-00210000", while its map_files entry is "200000-210000". The
// snapshot must still have the device's own number from stat of map_files.
func TestLiveLowAddressMapping(t *testing.T) {
	livetest.Require(t, "losetup")
	loop := livetest.NewLoop(t)
	f, err := os.OpenFile(loop.Node, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const size = 64 << 10
	var addr uintptr
	for _, a := range []uintptr{0x200000, 0x8000000, 0xf000000} {
		// The raw call: unix.MmapPtr wants the address as an unsafe.Pointer.
		p, _, errno := unix.Syscall6(unix.SYS_MMAP, a, size, syscall.PROT_READ|syscall.PROT_WRITE,
			syscall.MAP_SHARED|unix.MAP_FIXED_NOREPLACE, f.Fd(), 0)
		if errno == 0 && p == a {
			addr = a
			t.Cleanup(func() { _, _, _ = unix.Syscall(unix.SYS_MUNMAP, p, size, 0) })
			break
		}
		if errno == 0 {
			_, _, _ = unix.Syscall(unix.SYS_MUNMAP, p, size, 0) // a kernel without MAP_FIXED_NOREPLACE took it as a hint
		} else if err := error(errno); !errors.Is(err, unix.EEXIST) {
			t.Skipf("live /proc test: mmap of %s refused here: %v", loop.Node, err)
		}
	}
	if addr == 0 {
		t.Skip("live /proc test: no free low address to map the device at")
	}
	want := fmt.Sprintf("%08x-%08x", addr, addr+size)

	snap := captureLive(t)
	for _, p := range snap.Processes {
		if p.PID != os.Getpid() {
			continue
		}
		for _, m := range p.Mappings {
			if m.Address != want {
				continue
			}
			if m.DeviceNumber.String() != loop.DeviceNumber() || m.DeviceType != "block" || m.Path != loop.Node || m.Perms != "rw-s" {
				t.Errorf("mapping %s: %+v, want %s block %s rw-s", want, m, loop.DeviceNumber(), loop.Node)
			}
			return
		}
		t.Fatalf("the snapshot of this process lacks the mapping %s of %s: %+v", want, loop.Node, p.Mappings)
	}
	t.Fatalf("the snapshot lacks this process %d", os.Getpid())
}

// TestLiveNodeNames: this process maps one loop device through three more
// nodes: one outside any dev directory (only stat of map_files can tell it is
// a device), one with spaces in its name, and one deleted since. Each is a
// device mapping with the loop device's own number, its path as the kernel
// wrote it, and the deleted flag where the node is gone.
func TestLiveNodeNames(t *testing.T) {
	loop := livetest.NewLoop(t)
	dir := t.TempDir()
	nodes := map[string]struct {
		class   string
		deleted bool
	}{
		filepath.Join(dir, "gpu"):                          {"other", false},
		filepath.Join(filepath.Dir(loop.Node), "nvidia 1"): {"nvidia", false},
		filepath.Join(filepath.Dir(loop.Node), "nvidia2"):  {"nvidia", true},
	}
	for path, want := range nodes {
		if err := syscall.Mknod(path, syscall.S_IFBLK|0o600, int(unix.Mkdev(loop.Major, loop.Minor))); err != nil {
			t.Skipf("live /proc test: mknod refused here: %v", err)
		}
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		b, err := syscall.Mmap(int(f.Fd()), 0, 4096, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
		f.Close()
		if err != nil {
			t.Skipf("live /proc test: mmap of %s refused here: %v", path, err)
		}
		t.Cleanup(func() { _ = syscall.Munmap(b) })
		if want.deleted {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}
	}

	snap := captureLive(t)
	for _, p := range snap.Processes {
		if p.PID != os.Getpid() {
			continue
		}
		for path, want := range nodes {
			found := false
			for _, m := range p.Mappings {
				if m.Path != path {
					continue
				}
				found = true
				if m.Class != want.class || m.Deleted != want.deleted || m.DeviceNumber.String() != loop.DeviceNumber() || m.Perms != "rw-s" {
					t.Errorf("mapping of %q: %+v, want class %s, deleted %v, device %s", path, m, want.class, want.deleted, loop.DeviceNumber())
				}
			}
			if !found {
				t.Errorf("the snapshot lacks the mapping of %q: %+v", path, p.Mappings)
			}
		}
		return
	}
	t.Fatalf("the snapshot lacks this process %d", os.Getpid())
}

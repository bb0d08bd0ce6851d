package livetest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gpusnap/gpusnap/internal/testwait"
)

// Loop is a loop block device over a small temporary file, the stand-in for
// a GPU. Node is a second block node of the same device, named nvidia0 in a
// directory named dev, so gpusnap classes it as an NVIDIA device by its name
// while its device number (7:N) is the loop device's.
type Loop struct {
	Dev   string // the kernel's own node, e.g. /dev/loop3
	Major uint32 // 7
	Minor uint32
	Node  string // <tmp>/dev/nvidia0, made with mknod
}

// DeviceNumber is the device's own number as gpusnap records it, "MAJOR:MINOR".
func (l *Loop) DeviceNumber() string { return fmt.Sprintf("%d:%d", l.Major, l.Minor) }

// NewLoop attaches a 1 MiB temporary file to a free loop device and makes
// <tmp>/dev/nvidia0 for it. Cleanup detaches exactly that loop device.
func NewLoop(t testing.TB) *Loop {
	t.Helper()
	Require(t, "losetup")
	dir := t.TempDir()
	img := filepath.Join(dir, "gpu.img")
	if err := os.WriteFile(img, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatalf("livetest: %v", err)
	}
	dev, err := attach(img)
	if err != nil {
		t.Skipf("live /proc test: cannot attach a loop device here: %v", err)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
			t.Errorf("livetest: losetup -d %s: %v: %s", dev, err, out)
		}
	})
	var st syscall.Stat_t
	if err := syscall.Stat(dev, &st); err != nil {
		t.Fatalf("livetest: %v", err)
	}
	l := &Loop{Dev: dev, Major: major(st.Rdev), Minor: minor(st.Rdev), Node: filepath.Join(dir, "dev", "nvidia0")}
	if err := os.Mkdir(filepath.Dir(l.Node), 0o755); err != nil {
		t.Fatalf("livetest: %v", err)
	}
	if err := syscall.Mknod(l.Node, syscall.S_IFBLK|0o600, int(mkdev(l.Major, l.Minor))); err != nil {
		t.Skipf("live /proc test: mknod of a block node refused here: %v", err)
	}
	return l
}

// attach runs losetup -f --show, retrying for waitLimit. Concurrent tests
// can race for the same free device, and losetup then fails with "device
// busy". A loaded host is slow to settle it, and giving up skips the test.
func attach(img string) (string, error) {
	var err error
	var out []byte
	if testwait.For(waitLimit, "losetup to attach "+img, func() bool {
		out, err = exec.Command("losetup", "-f", "--show", img).CombinedOutput()
		return err == nil
	}) == nil {
		return strings.TrimSpace(string(out)), nil
	}
	return "", fmt.Errorf("losetup -f --show: %v: %s", err, strings.TrimSpace(string(out)))
}

// major, minor and mkdev follow glibc's encoding of a 64-bit dev_t.
func major(dev uint64) uint32 { return uint32((dev>>8)&0xfff | (dev>>32)&^0xfff) }
func minor(dev uint64) uint32 { return uint32(dev&0xff | (dev>>12)&^0xff) }
func mkdev(maj, mnr uint32) uint64 {
	return uint64(maj&0xfff)<<8 | uint64(maj&^0xfff)<<32 | uint64(mnr&0xff) | uint64(mnr&^0xff)<<12
}

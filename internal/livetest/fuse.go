package livetest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/gpusnap/gpusnap/internal/testwait"
)

// StuckFUSE mounts a FUSE file system whose daemon never answers, so every
// lookup below it waits in the kernel in D state, as on a hung NFS or driver
// call. It returns a path below the mount. Cleanup detaches the mount and
// closes /dev/fuse, which aborts the connection and wakes every waiter.
func StuckFUSE(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("live /proc test: cannot open /dev/fuse here: %v", err)
	}
	opts := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0", fd)
	if err := unix.Mount("gpusnap-stuck", dir, "fuse", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		unix.Close(fd)
		t.Skipf("live /proc test: cannot mount a FUSE file system here: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("livetest: umount %s: %v", dir, err)
		}
		unix.Close(fd)
	})
	return filepath.Join(dir, "weights.bin")
}

// MapThenStick runs python3 mapping node MAP_SHARED read-write, then
// opening path (below StuckFUSE's mount), and returns once it sits in D
// state there, a GPU user that kill -9 does not end at once. Cleanup kills
// it by PID (a FUSE wait is killable) and reaps it.
func MapThenStick(t testing.TB, node, path string) Proc {
	t.Helper()
	Require(t, "python3")
	pid := startReady(t, `import mmap, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
m = mmap.mmap(fd, 65536, mmap.MAP_SHARED)
print("ready", flush=True)
open(sys.argv[2]).read()`, node, path)
	start, state, err := readStat(pid)
	_ = testwait.For(10*time.Second, fmt.Sprintf("pid %d to enter D state", pid), func() bool {
		_, state, err = readStat(pid)
		return err != nil || state == 'D'
	})
	if err != nil || state != 'D' {
		data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", pid))
		t.Fatalf("livetest: pid %d did not enter D state reading %s: state %c, wchan %q, %v", pid, path, state, data, err)
	}
	return Proc{PID: pid, NSPID: pid, StartTime: start}
}

// StallingFUSE mounts at mnt a FUSE passthrough of backing, with
// allow_other, named tenantfs. Once the flag it returns is set, its nodes'
// open, getattr and read requests wait (until the request is interrupted,
// or the test ends), as a tenant's server that stops answering.
func StallingFUSE(t testing.TB, backing, mnt string) *atomic.Bool {
	t.Helper()
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("live /proc test: cannot open /dev/fuse here: %v", err)
	}
	unix.Close(fd)
	var stall atomic.Bool
	release := make(chan struct{})
	loop, err := fs.NewLoopbackRoot(backing)
	if err != nil {
		t.Fatalf("livetest: %v", err)
	}
	root := &stallingNode{LoopbackNode: loop.(*fs.LoopbackNode), stall: &stall, release: release}
	server, err := fs.Mount(mnt, root, &fs.Options{MountOptions: fuse.MountOptions{AllowOther: true, DirectMountStrict: true,
		FsName: "tenantfs", Name: "tenantfs"}})
	if err != nil {
		t.Fatalf("livetest: FUSE mount at %s: %v", mnt, err)
	}
	t.Cleanup(func() {
		close(release)
		_ = server.Unmount()
	})
	return &stall
}

// stallingNode is a passthrough node whose open and getattr wait while
// stall is set.
type stallingNode struct {
	*fs.LoopbackNode
	stall   *atomic.Bool
	release chan struct{}
}

// WrapChild makes each node below the root a stallingNode too.
func (n *stallingNode) WrapChild(_ context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	return &stallingNode{LoopbackNode: ops.(*fs.LoopbackNode), stall: n.stall, release: n.release}
}

func (n *stallingNode) wait(ctx context.Context) {
	if n.stall.Load() {
		select {
		case <-ctx.Done():
		case <-n.release:
		}
	}
}

// Open opens the backing file behind a handle that hides it from the
// kernel (no FUSE passthrough), so that each read of the file asks this
// server.
func (n *stallingNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	n.wait(ctx)
	fh, out, errno := n.LoopbackNode.Open(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	return &servedFile{fh}, out, 0
}

// servedFile is a loopback file served by this process alone.
type servedFile struct{ inner fs.FileHandle }

func (f *servedFile) Release(ctx context.Context) syscall.Errno {
	if r, ok := f.inner.(fs.FileReleaser); ok {
		return r.Release(ctx)
	}
	return 0
}

// Read serves a page a mapping of the file faults in, or a read(2).
func (n *stallingNode) Read(ctx context.Context, f fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n.wait(ctx)
	if sf, ok := f.(*servedFile); ok {
		f = sf.inner
	}
	if r, ok := f.(fs.FileReader); ok {
		return r.Read(ctx, dest, off)
	}
	return nil, syscall.ENOTSUP
}

func (n *stallingNode) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.wait(ctx)
	return n.LoopbackNode.Getattr(ctx, f, out)
}

// MapFile starts a process that maps path read-only, touching none of its
// pages, and sleeps: a page of it is read from its filesystem only when
// something reads the mapping.
func MapFile(t testing.TB, path string) Proc {
	t.Helper()
	Require(t, "python3")
	pid := startReady(t, `import mmap, sys, time
f = open(sys.argv[1], "rb")
m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
print("ready", flush=True)
time.sleep(600)`, path)
	start, _, err := readStat(pid)
	if err != nil {
		t.Fatalf("livetest: %v", err)
	}
	return Proc{PID: pid, NSPID: pid, StartTime: start}
}

// startReady runs python3 -c script args, killed at cleanup, waits for it
// to print "ready" and returns its PID.
func startReady(t testing.TB, script string, args ...string) int {
	t.Helper()
	cmd := exec.Command("python3", append([]string{"-c", script}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("livetest: %v", err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("livetest: python3: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("livetest: python3 %s did not get ready: %q %v", args, line, err)
	}
	return cmd.Process.Pid
}

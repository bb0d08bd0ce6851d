package capture_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpusnap/gpusnap/bpf"
	"github.com/gpusnap/gpusnap/capture"
	"github.com/gpusnap/gpusnap/internal/livetest"
	"github.com/gpusnap/gpusnap/snapshot"
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

// TestLiveMappingFlood: a tenant maps a device node named nvidia0 60,000
// times (under the default vm.max_map_count), another 300 times. By either
// path a capture keeps MappingsPerDevice of their lines and counts the rest
// in one run, keeps TextLimit bytes of the maps text and names the whole by
// length and SHA-256, and allocates a bounded amount doing so: a path that
// renders, buffers or copies every mapping (the BPF path once allocated
// 1.1 KB a mapping and 92 MiB of RSS for 100,000) fails here. The BPF path
// walks the 300 in the kernel and reads the 60,000 from /proc. The bound is
// on what the tenants add to a capture of this host without them: the host's
// own processes (thousands, where other tests run beside this one) are not
// the tenants' doing.
func TestLiveMappingFlood(t *testing.T) {
	livetest.Require(t, "losetup", "gcc")
	const want = 60000
	count := want
	if b, err := os.ReadFile("/proc/sys/vm/max_map_count"); err == nil {
		if max, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && max-1000 < count {
			count = max - 1000
		}
	}
	if count < want/2 {
		t.Skipf("live /proc test: vm.max_map_count allows %d mappings, want %d", count+1000, want)
	}
	loop := livetest.NewLoop(t)
	usePrivateBPFFS(t)
	base := map[string]hostAlloc{}
	for _, path := range []string{capture.PathProc, capture.PathBPF} {
		base[path] = captureAlloc(t, path, true)
	}
	type tenant struct {
		livetest.Proc
		count int
		cut   *snapshot.Cut // of its maps text
	}
	var tenants []tenant
	for _, n := range []int{300, count} {
		p := livetest.HoldMappings(t, loop.Node, n)
		maps, err := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/maps")
		if err != nil {
			t.Fatal(err)
		}
		var cut *snapshot.Cut
		if len(maps) > snapshot.TextLimit {
			sum := sha256.Sum256(maps)
			cut = &snapshot.Cut{Length: int64(len(maps)), SHA256: hex.EncodeToString(sum[:])}
		}
		tenants = append(tenants, tenant{p, n, cut})
	}

	for _, path := range []string{capture.PathProc, capture.PathBPF} {
		if base[path].err != nil {
			t.Skipf("the kernel refuses the BPF capture path: %v", base[path].err)
		}
		got := captureAlloc(t, path, false)
		snap := got.snap
		// 20 MiB over the host's share: the tenants add about 1 MiB by either
		// path (the BPF path's iterators pinned), whatever the count. The
		// host's share is the baseline's allocation a process, times the
		// processes read now: other tests start and end theirs meanwhile.
		host := base[path].alloc * uint64(len(snap.Processes)) / uint64(max(1, len(base[path].snap.Processes)))
		if got.alloc > host+20<<20 {
			t.Errorf("%s: the capture allocated %d MiB for %d mappings of one device, %d MiB over the host's %d MiB", path, got.alloc>>20, count, (got.alloc-host)>>20, host>>20)
		}
		for _, tn := range tenants {
			p := findLive(t, snap, tn.PID)
			lines := len(p.Mappings)
			for _, r := range p.MappingRuns {
				lines += r.Lines
			}
			// The tenant's own read-write mapping of the node is one more line.
			if lines != tn.count+1 || len(p.Mappings) != snapshot.MappingsPerDevice+1 || len(p.MappingRuns) != 1 {
				t.Errorf("%s, %d mappings: %d kept and %d runs for %d lines, want %d kept, one run", path, tn.count, len(p.Mappings), len(p.MappingRuns), lines, snapshot.MappingsPerDevice+1)
			}
			var wantMaps int
			switch {
			case p.Raw == nil:
				t.Errorf("%s, %d mappings: no raw text", path, tn.count)
				continue
			case tn.cut != nil:
				wantMaps = snapshot.TextLimit
			default:
				wantMaps = len(p.Raw.Maps)
			}
			if c, ok := p.Raw.Cuts["maps"]; len(p.Raw.Maps) != wantMaps || ok != (tn.cut != nil) || ok && c != *tn.cut {
				t.Errorf("%s, %d mappings: raw maps of %d bytes, cut %+v; want %d and %+v", path, tn.count, len(p.Raw.Maps), p.Raw.Cuts, wantMaps, tn.cut)
			}
		}
		t.Logf("%s: %d and %d mappings, capture allocated %.1f MiB; without them %.1f MiB for %d processes, now %d", path, tenants[0].count, count,
			float64(got.alloc)/(1<<20), float64(base[path].alloc)/(1<<20), len(base[path].snap.Processes), len(snap.Processes))
	}
}

// hostAlloc is one capture of the live host and what it allocated; err is
// the BPF path's refusal.
type hostAlloc struct {
	snap  *snapshot.Snapshot
	alloc uint64
	err   error
}

// captureAlloc captures the host by path, once to warm it (the BPF path
// loads and pins its iterators), then again, measured. Where warm is set, a
// refused BPF path is returned in err; else it skips the test.
func captureAlloc(t *testing.T, path string, warm bool) hostAlloc {
	t.Helper()
	if warm {
		if _, err := capture.Capture(context.Background(), capture.Options{Path: path}); err != nil && path == capture.PathBPF {
			return hostAlloc{err: err}
		}
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	snap := capturePath(t, path)
	runtime.ReadMemStats(&after)
	return hostAlloc{snap: snap, alloc: after.TotalAlloc - before.TotalAlloc}
}

// usePrivateBPFFS points bpf.PinRoot at a BPF filesystem mounted for the
// test, where the BPF path pins its iterators as on a host whose systemd
// mounts /sys/fs/bpf; without one it loads them for every capture.
func usePrivateBPFFS(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mount("bpf", dir, "bpf", 0, "mode=0700"); err != nil {
		return
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	old := bpf.PinRoot
	bpf.PinRoot = dir + "/gpusnap"
	t.Cleanup(func() { bpf.PinRoot = old })
}

// findLive is the process pid of snap.
func findLive(t *testing.T, snap *snapshot.Snapshot, pid int) *snapshot.Process {
	t.Helper()
	for i := range snap.Processes {
		if snap.Processes[i].PID == pid {
			return &snap.Processes[i]
		}
	}
	t.Fatalf("the %s capture lacks process %d", snap.Scan.CapturePath, pid)
	return nil
}

// TestLiveSuspectAnonBounded: this process holds a node named nvidia0 and
// makes 270 anonymous executable mappings of 64 MiB (address space only,
// kept apart by unmapped pages so none merge). Both capture paths keep
// MappingsPerDevice of them and count the rest in one anon_exec run.
func TestLiveSuspectAnonBounded(t *testing.T) {
	loop := livetest.NewLoop(t)
	f, err := os.Open(loop.Node)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const n, size, page = 270, 64 << 20, 4096
	for range n {
		// One page more on each side, unmapped again: a gap no merge crosses.
		addr, _, errno := unix.Syscall6(unix.SYS_MMAP, 0, size+2*page, unix.PROT_READ|unix.PROT_EXEC,
			unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE, ^uintptr(0), 0)
		if errno != 0 {
			t.Skipf("mmap of 64 MiB of address space refused here: %v", errno)
		}
		unix.Syscall(unix.SYS_MUNMAP, addr, page, 0)
		unix.Syscall(unix.SYS_MUNMAP, addr+page+size, page, 0)
		t.Cleanup(func() { unix.Syscall(unix.SYS_MUNMAP, addr+page, size, 0) })
	}
	for _, path := range []string{capture.PathProc, capture.PathBPF} {
		t.Run(path, func(t *testing.T) {
			p := findLive(t, capturePath(t, path), os.Getpid())
			anon := 0
			for _, m := range p.SuspectAnon {
				if m.Size == size && m.Perms == "r-xp" {
					anon++
				}
			}
			i := slices.IndexFunc(p.MappingRuns, func(r snapshot.MappingRun) bool { return r.Class == snapshot.ClassAnonExec })
			if len(p.SuspectAnon) != snapshot.MappingsPerDevice || i < 0 || p.MappingRuns[i].Lines+anon < n {
				t.Fatalf("%d suspect anonymous mappings kept (%d of ours), runs %+v; want %d kept and the rest of our %d counted",
					len(p.SuspectAnon), anon, p.MappingRuns, snapshot.MappingsPerDevice, n)
			}
		})
	}
}

// TestLiveMapsInodeRepeated: an overlay whose layers lie on two filesystems
// (xino off) shows each file under the overlay's one device number with its
// layer's own inode number, so a library of the lower layer and a device
// node of the upper one can read as one file in maps. A capture that took
// the second for the first by (dev, inode) dismissed the node's rw-s
// mapping as the library, or made the library a device.
func TestLiveMapsInodeRepeated(t *testing.T) {
	loop := livetest.NewLoop(t)
	base := t.TempDir()
	mount := func(target, fstype, data string) {
		if err := os.MkdirAll(target, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mount(fstype, target, fstype, 0, data); err != nil {
			t.Skipf("live /proc test: mount of %s refused here: %v", fstype, err)
		}
		t.Cleanup(func() {
			if err := syscall.Unmount(target, syscall.MNT_DETACH); err != nil {
				t.Errorf("unmount %s: %v", target, err)
			}
		})
	}
	lower, upper := filepath.Join(base, "lower"), filepath.Join(base, "upper")
	mount(lower, "tmpfs", "mode=0755")
	mount(upper, "tmpfs", "mode=0755")
	for _, d := range []string{filepath.Join(upper, "u", "dev"), filepath.Join(upper, "w"), filepath.Join(lower, "dev")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	node := filepath.Join(upper, "u", "dev", "nvidia0")
	if err := unix.Mknod(node, unix.S_IFBLK|0o600, int(unix.Mkdev(loop.Major, loop.Minor))); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(node, &st); err != nil {
		t.Fatal(err)
	}
	// The lower layer's inode numbers count up from its own start: make
	// files until the library has the node's number.
	lib := ""
	for i := 0; i < 10000 && lib == ""; i++ {
		p := filepath.Join(lower, "dev", fmt.Sprintf("lib%d.so", i))
		if err := os.WriteFile(p, make([]byte, 4096), 0o644); err != nil {
			t.Fatal(err)
		}
		var ls unix.Stat_t
		if err := unix.Stat(p, &ls); err != nil {
			t.Fatal(err)
		}
		if ls.Ino == st.Ino {
			lib = filepath.Base(p)
		}
	}
	if lib == "" {
		t.Skipf("live /proc test: no lower-layer file reached inode %d", st.Ino)
	}
	merged := filepath.Join(base, "merged")
	mount(merged, "overlay", "lowerdir="+lower+",upperdir="+filepath.Join(upper, "u")+",workdir="+filepath.Join(upper, "w")+",xino=off")
	mapFile := func(path string, flag, prot int) {
		f, err := os.OpenFile(path, flag, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		b, err := unix.Mmap(int(f.Fd()), 0, 4096, prot, unix.MAP_SHARED)
		if err != nil {
			t.Skipf("live /proc test: mmap of %s refused here: %v", path, err)
		}
		t.Cleanup(func() { _ = unix.Munmap(b) })
	}
	libPath, nodePath := filepath.Join(merged, "dev", lib), filepath.Join(merged, "dev", "nvidia0")
	// The library on both sides of the node: whichever maps lists first,
	// the other's line comes after it.
	mapFile(libPath, os.O_RDONLY, unix.PROT_READ)
	mapFile(nodePath, os.O_RDWR, unix.PROT_READ|unix.PROT_WRITE)
	mapFile(libPath, os.O_RDONLY, unix.PROT_READ)
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, line := range strings.Split(string(maps), "\n") {
		if f := strings.Fields(line); len(f) == 6 && (f[5] == libPath || f[5] == nodePath) {
			ids = append(ids, f[3]+" "+f[4])
		}
	}
	if len(ids) != 3 || ids[0] != ids[1] || ids[1] != ids[2] {
		t.Skipf("live /proc test: this kernel's maps tells the two files apart (%q): nothing to test", ids)
	}

	var got []string
	for _, p := range captureLive(t).Processes {
		for _, m := range p.Mappings {
			if p.PID == os.Getpid() && strings.HasPrefix(m.Path, merged) {
				got = append(got, m.Path+" "+m.Perms+" "+m.DeviceNumber.String()+" "+m.Class)
			}
		}
	}
	if want := []string{nodePath + " rw-s " + loop.DeviceNumber() + " nvidia"}; !slices.Equal(got, want) {
		t.Errorf("mappings of the overlay (both %s in maps): %q, want %q", ids[0], got, want)
	}
}

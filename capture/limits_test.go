package capture

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/capture/procfs"
	"github.com/gpusnap/gpusnap/snapshot"
)

// tenantTree writes a one-process proc root whose process 90 has the given
// maps and cmdline.
func tenantTree(t *testing.T, maps, cmdline []byte) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "90")
	must(t, os.MkdirAll(filepath.Join(dir, "fd"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "stat"), []byte("90 (tenant) S 1 90 90 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 99 0 0\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "status"), []byte("Uid:\t1000\t1000\t1000\t1000\nNSpid:\t90\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "cmdline"), cmdline, 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "maps"), maps, 0o644))
	return root
}

// TestMappingRunsSummarised: a process mapping one device 100,000 times keeps
// its first MappingsPerDevice lines, and past them only a line with new
// permissions (the one writable mapping near the end); the rest are one run
// with their count and size. Another device keeps its own lines.
func TestMappingRunsSummarised(t *testing.T) {
	var b bytes.Buffer
	const n = 100000
	for i := range n {
		perms := "r--s"
		if i == n-10 {
			perms = "rw-s"
		}
		fmt.Fprintf(&b, "%x-%x %s 00000000 00:06 1043 /dev/nvidia0\n", 0x10000000+2*i*0x1000, 0x10001000+2*i*0x1000, perms)
	}
	b.WriteString("7f0000000000-7f0000001000 rw-s 00000000 00:06 1044 /dev/nvidia1\n")
	p := findPID(t, captureFixture(t, tenantTree(t, b.Bytes(), []byte("x\x00")), nil), 90)
	if len(p.Mappings) != snapshot.MappingsPerDevice+2 {
		t.Fatalf("%d mappings kept, want %d", len(p.Mappings), snapshot.MappingsPerDevice+2)
	}
	if !slices.ContainsFunc(p.Mappings, func(m snapshot.Mapping) bool { return m.Path == "/dev/nvidia0" && m.Writable() }) {
		t.Error("the one writable mapping of nvidia0 past the first 256 lines was not kept")
	}
	if !slices.ContainsFunc(p.Mappings, func(m snapshot.Mapping) bool { return m.Path == "/dev/nvidia1" }) {
		t.Error("nvidia1's mapping was not kept")
	}
	want := []snapshot.MappingRun{{Path: "/dev/nvidia0", Class: snapshot.ClassNVIDIA, GPUMinor: p.Mappings[0].GPUMinor,
		Lines: n - snapshot.MappingsPerDevice - 1, Bytes: (n - snapshot.MappingsPerDevice - 1) * 0x1000, Perms: []string{"r--s"}}}
	if fmt.Sprint(p.MappingRuns) != fmt.Sprint(want) || *p.MappingRuns[0].GPUMinor != 0 {
		t.Errorf("runs %+v, want %+v", p.MappingRuns, want)
	}
}

// TestMappingRunsManyDevices: a process mapping 10,000 different device
// nodes keeps a bounded number of lines; the devices past the runs kept
// share one.
func TestMappingRunsManyDevices(t *testing.T) {
	var b bytes.Buffer
	for i := range 10000 {
		for j := range 3 {
			fmt.Fprintf(&b, "%x-%x r--s 00000000 00:06 %d /dev/nvidia-caps/nvidia-cap%d\n", 0x10000000+(3*i+j)*0x2000, 0x10001000+(3*i+j)*0x2000, 5000+i, i)
		}
	}
	p := findPID(t, captureFixture(t, tenantTree(t, b.Bytes(), []byte("x\x00")), nil), 90)
	if len(p.Mappings) > 4*snapshot.MappingsPerDevice+(procfs.MaxRuns+1)*16 {
		t.Errorf("%d mappings kept", len(p.Mappings))
	}
	lines := len(p.Mappings)
	for _, r := range p.MappingRuns {
		lines += r.Lines
	}
	if lines != 30000 || len(p.MappingRuns) > procfs.MaxRuns+1 || p.MappingRuns[len(p.MappingRuns)-1].Path != "" {
		t.Errorf("%d lines accounted for in %d mappings and %d runs, want 30000 and a shared last run", lines, len(p.Mappings), len(p.MappingRuns))
	}
}

// TestCmdlineCut: a 5.5 MB command line keeps its first CmdlineLimit bytes,
// named whole by length and SHA-256, in the parsed arguments and the raw text.
func TestCmdlineCut(t *testing.T) {
	arg := strings.Repeat("A", 128<<10-1)
	var cmd bytes.Buffer
	for range 43 {
		cmd.WriteString(arg + "\x00")
	}
	sum := sha256.Sum256(cmd.Bytes())
	maps := []byte("7f0000000000-7f0000001000 rw-s 00000000 00:06 1044 /dev/nvidia1\n")
	p := findPID(t, captureFixture(t, tenantTree(t, maps, cmd.Bytes()), nil), 90)
	want := snapshot.Cut{Length: int64(cmd.Len()), SHA256: hex.EncodeToString(sum[:])}
	if p.CmdlineCut == nil || *p.CmdlineCut != want || p.Raw.Cuts["cmdline"] != want {
		t.Fatalf("cut %+v / %+v, want %+v", p.CmdlineCut, p.Raw.Cuts, want)
	}
	if len(strings.Join(p.Cmdline, "\x00")) != snapshot.CmdlineLimit || len(p.Raw.Cmdline) != snapshot.CmdlineLimit {
		t.Errorf("kept %d bytes of arguments and %d of raw text, want %d", len(strings.Join(p.Cmdline, "\x00")), len(p.Raw.Cmdline), snapshot.CmdlineLimit)
	}
}

// TestMapsErrorsBounded: a tree's maps of 200,000 malformed lines costs a
// bounded list of errors.
func TestMapsErrorsBounded(t *testing.T) {
	maps := bytes.Repeat([]byte("garbage\n"), 200000)
	p := findPID(t, captureFixture(t, tenantTree(t, maps, []byte("x\x00")), nil), 90)
	n := 0
	for _, e := range p.Errors {
		if strings.HasPrefix(e, "maps") {
			n++
		}
	}
	if n != procfs.MaxMapsErrors+1 || !slices.Contains(p.Errors, "maps: 199984 more malformed lines") {
		t.Errorf("%d errors, last %q", len(p.Errors), p.Errors[len(p.Errors)-1])
	}
}

// TestMapsScannedAsReadKeepsWhatWholeKeeps: a maps text longer than the
// read buffer is scanned a buffer at a time; around the buffer's size
// (exactly TextLimit, one byte more or less) and over several buffers, with
// lines cut by each buffer's end, it keeps what cutText and ScanMaps keep of
// the whole text: the same mappings, the same first TextLimit bytes, the
// same length and SHA-256 (none for a text of TextLimit bytes or less).
func TestMapsScannedAsReadKeepsWhatWholeKeeps(t *testing.T) {
	line := func(i int, path string) string {
		return fmt.Sprintf("%x-%x rw-s 00000000 00:06 %d %s\n", 0x10000000+2*i*0x1000, 0x10001000+2*i*0x1000, 1043+i%3, path)
	}
	for _, size := range []int{snapshot.TextLimit - 1, snapshot.TextLimit, snapshot.TextLimit + 1, 3*snapshot.TextLimit + snapshot.TextLimit/2} {
		// Lines up to a last one whose path is padded so the text is
		// exactly size bytes.
		var text []byte
		for i := 0; len(text)+2*len(line(i, "/dev/nvidia0")) < size; i++ {
			text = append(text, line(i, fmt.Sprintf("/dev/nvidia%d", i%3))...)
		}
		pad := size - len(text) - len(line(0, "/dev/nvidia0"))
		text = append(text, line(0, "/dev/"+strings.Repeat("x", pad)+"nvidia0")...)
		if len(text) != size {
			t.Fatalf("built %d bytes, want %d", len(text), size)
		}
		p := findPID(t, captureFixture(t, tenantTree(t, text, []byte("x\x00")), nil), 90)
		wantRaw, wantCut := cutText(text)
		if p.Raw == nil || p.Raw.Maps != wantRaw {
			t.Errorf("size %d: raw maps differ from the text's first %d bytes", size, snapshot.TextLimit)
			continue
		}
		if got, ok := p.Raw.Cuts["maps"]; ok != (wantCut != nil) || (ok && got != *wantCut) {
			t.Errorf("size %d: cut %+v (%v), want %+v", size, got, ok, wantCut)
		}
		whole := (&procfs.MapsScanner{Classes: snapshot.DeviceClasses{}}).ScanMaps(text)
		if !reflect.DeepEqual(p.Mappings, whole.Mappings) || !reflect.DeepEqual(p.MappingRuns, whole.Runs) {
			t.Errorf("size %d: %d mappings and runs %v, the whole text's %d and %v", size, len(p.Mappings), p.MappingRuns, len(whole.Mappings), whole.Runs)
		}
	}
}

// TestSuspectAnonBounded: a tenant that uses an NVIDIA device and makes
// 5,000 anonymous executable mappings of 64 MiB keeps MappingsPerDevice of
// them, the rest counted in one run of class anon_exec.
func TestSuspectAnonBounded(t *testing.T) {
	var b bytes.Buffer
	b.WriteString("7f0000000000-7f0000001000 rw-s 00000000 00:06 1044 /dev/nvidia0\n")
	const n, size = 5000, 64 << 20
	for i := range n {
		start := 0x100000000 + uint64(i)*(size+0x2000)
		fmt.Fprintf(&b, "%x-%x r-xp 00000000 00:00 0\n", start, start+size)
	}
	p := findPID(t, captureFixture(t, tenantTree(t, b.Bytes(), []byte("x\x00")), nil), 90)
	if len(p.SuspectAnon) != snapshot.MappingsPerDevice {
		t.Fatalf("%d suspect anonymous mappings kept, want %d", len(p.SuspectAnon), snapshot.MappingsPerDevice)
	}
	want := snapshot.MappingRun{Class: snapshot.ClassAnonExec, Lines: n - snapshot.MappingsPerDevice, Bytes: (n - snapshot.MappingsPerDevice) * size, Perms: []string{"r-xp"}}
	if i := slices.IndexFunc(p.MappingRuns, func(r snapshot.MappingRun) bool { return r.Class == snapshot.ClassAnonExec }); i < 0 || !reflect.DeepEqual(p.MappingRuns[i], want) {
		t.Errorf("runs %+v, want one %+v", p.MappingRuns, want)
	}
}

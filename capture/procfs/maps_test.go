package procfs

import (
	"bytes"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/snapshot"
)

func TestParseMapsLine(t *testing.T) {
	for _, tc := range []struct {
		line    string
		want    MapsLine
		path    string
		wantErr string
	}{
		{
			line: "7f2c0a200000-7f2c0a400000 rw-s 00000000 00:06 1043                       /dev/nvidia0",
			want: MapsLine{Start: 0x7f2c0a200000, End: 0x7f2c0a400000, Perms: [4]byte{'r', 'w', '-', 's'}, DevMajor: 0, DevMinor: 6, Inode: 1043},
			path: "/dev/nvidia0",
		},
		{ // spaces inside the path are kept; " (deleted)" is cut off and flagged
			line: "00400000-00452000 r-xp 00001000 fd:01 123 /opt/my  app/lib x.so (deleted)",
			want: MapsLine{Start: 0x400000, End: 0x452000, Perms: [4]byte{'r', '-', 'x', 'p'}, Offset: 0x1000, DevMajor: 0xfd, DevMinor: 1, Inode: 123, Deleted: true},
			path: "/opt/my  app/lib x.so",
		},
		{ // anonymous, with the kernel's trailing space
			line: "7f564a29e000-7f564a2a1000 rw-p 00000000 00:00 0 ",
			want: MapsLine{Start: 0x7f564a29e000, End: 0x7f564a2a1000, Perms: [4]byte{'r', 'w', '-', 'p'}},
		},
		{ // anonymous without it, and a three-digit major
			line: "1000-2000 ---p 00000000 103:02 0",
			want: MapsLine{Start: 0x1000, End: 0x2000, Perms: [4]byte{'-', '-', '-', 'p'}, DevMajor: 0x103, DevMinor: 2},
		},
		{line: "7fff-7ffe rw-p 00000000 00:00 0", wantErr: "end 0x7ffe before start"},
		{line: "garbage", wantErr: "no fields after the address"},
		{line: "1000 rw-p 0 00:00 0", wantErr: "has no '-'"},
		{line: "1000-zz00 rw-p 0 00:00 0", wantErr: "bad end address"},
		{line: "1000-2000 rwxq 0 00:00 0", wantErr: "bad permissions"},
		{line: "1000-2000 rw-p 0g 00:00 0", wantErr: "bad offset"},
		{line: "1000-2000 rw-p 0 0000 0", wantErr: "bad dev field"},
		{line: "1000-2000 rw-p 0 00:00 x1 /a", wantErr: "bad inode"},
		{line: "1000-2000 rw-p 0 00:00", wantErr: "no inode field"},
		{line: "1000-2000 rw-p 0 00:00 99999999999999999999999", wantErr: "bad inode"},
		{line: "11111111111111111-2000 rw-p 0 00:00 0", wantErr: "bad start address"},
	} {
		got, err := ParseMapsLine([]byte(tc.line))
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "malformed maps line") {
				t.Errorf("%q: err %v, want %q", tc.line, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.line, err)
			continue
		}
		if string(got.Path) != tc.path {
			t.Errorf("%q: path %q, want %q", tc.line, got.Path, tc.path)
		}
		got.Path = nil
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q:\n got %+v\nwant %+v", tc.line, got, tc.want)
		}
	}
}

func TestParseMapsLineNoAlloc(t *testing.T) {
	line := []byte("7f2c0a200000-7f2c0a400000 rw-s 00000000 00:06 1043                       /dev/nvidia0 (deleted)")
	if n := testing.AllocsPerRun(100, func() { _, _ = ParseMapsLine(line) }); n != 0 {
		t.Errorf("ParseMapsLine allocates %v times per line", n)
	}
}

// TestScanMapsStatDecides: where stat of map_files works, the file type
// decides, whatever the path says.
func TestScanMapsStatDecides(t *testing.T) {
	maps := strings.Join([]string{
		"1000-2000 rw-s 00000000 00:01 77 /dev/zero (deleted)",   // shmem: a regular file
		"2000-3000 rw-s 00000000 fd:01 500 /tmp/.x/gpu",          // a 195:2 node outside /dev: GPU 2
		"3000-4000 rw-s 00000000 00:05 1050 /dev/fb0",            // renamed 195:5 node: NVIDIA, GPU 5
		"4000-5000 rw-s 00000000 00:05 1060 /dev/nvidia-uvm",     // 508: nvidia-uvm by /proc/devices
		"5000-6000 r--p 00000000 fd:01 600 /usr/lib/libc.so.6",   // a library
		"6000-7000 r--p 00000000 fd:01 600 /usr/lib/libc.so.6",   // again: cached, not stat'ed twice
		"7000-8000 rw-s 00000000 00:05 1070 /dev/loop3",          // block 7:3
		"8000-9000 rw-s 00000000 00:05 1080 /dev/nvidiactl",      // stat fails: the path rule decides
		"9000-a000 rw-s 00000000 00:05 1051 /dev/nvidia0",        // 195:255 nvidiactl under another name
		"a000-b000 rw-s 00000000 00:05 1052 /dev/nvidia-modeset", // 195:254: GPU 254 by spec.md's Device rule, which no GPU has
		"b000-c000 rw-s 00000000 00:0d 1090 /dmabuf:",            // DMA-buf: no file type, an other device
	}, "\n") + "\n"
	kinds := map[uint64]snapshot.FileKind{
		77:   {},
		500:  {Device: true, Char: true, Major: 195, Minor: 2},
		1050: {Device: true, Char: true, Major: 195, Minor: 5},
		1060: {Device: true, Char: true, Major: 508},
		600:  {},
		1070: {Device: true, Major: 7, Minor: 3},
		1051: {Device: true, Char: true, Major: 195, Minor: 255},
		1052: {Device: true, Char: true, Major: 195, Minor: 254},
		1090: {},
	}
	stats := 0
	cache := map[uint64]snapshot.FileKind{}
	sc := MapsScanner{
		Classes: ParseDevices([]byte("Character devices:\n195 nvidia-frontend\n508 nvidia-uvm\n\nBlock devices:\n  7 loop\n")),
		Stat: func(rangeText, _ []byte, major, minor uint32, inode uint64) (snapshot.FileKind, bool) {
			if k, ok := cache[inode]; ok {
				return k, true
			}
			stats++
			k, ok := kinds[inode]
			if ok {
				cache[inode] = k
			}
			return k, ok
		},
	}
	res := sc.ScanMaps([]byte(maps))
	var got []string
	for _, m := range res.Mappings {
		g := "-"
		if m.GPUMinor != nil {
			g = strconv.Itoa(*m.GPUMinor)
		}
		got = append(got, m.Path+" "+m.Class+" "+m.DeviceNumber.String()+" "+m.DeviceType+" gpu="+g)
	}
	want := []string{
		"/tmp/.x/gpu nvidia 195:2 char gpu=2",
		"/dev/fb0 nvidia 195:5 char gpu=5",
		"/dev/nvidia-uvm nvidia 508:0 char gpu=-",
		"/dev/nvidiactl nvidia   gpu=-",
		"/dev/nvidia0 nvidia 195:255 char gpu=-",
		"/dev/nvidia-modeset nvidia 195:254 char gpu=254",
		"/dev/loop3 other 7:3 block gpu=-",
		"/dmabuf: other   gpu=-",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("mappings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if stats != 10 {
		t.Errorf("%d stats, want 10 (the second libc line comes from the cache)", stats)
	}
	if len(res.Errors) != 0 || len(res.SuspectAnon) != 0 {
		t.Errorf("errors %q anon %v", res.Errors, res.SuspectAnon)
	}
}

// TestScanMapsPathRule: without stat, the path rule (spec.md, Device rule) decides.
func TestScanMapsPathRule(t *testing.T) {
	var sc MapsScanner
	for _, tc := range []struct {
		path, perms string
		device      bool
		class       string
	}{
		{"/dev/nvidia0", "rw-s", true, snapshot.ClassNVIDIA},
		{"/dev/nvidia-caps/nvidia-cap1", "r--s", true, snapshot.ClassNVIDIA}, // parent nvidia-caps, name nvidia*: not in a dev dir, but under /dev
		{"/dev/dri/card0", "rw-s", true, snapshot.ClassOther},
		{"/dev/zero (deleted)", "rw-s", false, ""},
		{"/dev/zero (deleted)", "rw-p", true, snapshot.ClassOther},
		{"/dev/zero", "r--p", true, snapshot.ClassOther},
		{"/dev/shm/x", "rw-s", false, ""},
		{"/dev/shm", "rw-s", false, ""},
		{"/dev/mqueue/q", "rw-s", false, ""},
		{"/dev/hugepages/h", "rw-s", false, ""},
		{"/dev/hugepages/dev/nvidia0", "rw-s", false, ""},
		{"/srv/x/dev/nvidia0", "rw-s", true, snapshot.ClassNVIDIA},
		{"/home/u/dev/project/lib.so", "r-xp", false, ""},
		{"/home/u/devices/nvidia0", "r-xp", false, ""},
		{"/usr/lib/libc.so.6", "r-xp", false, ""},
		{"/dmabuf:", "rw-s", true, snapshot.ClassOther}, // DMA-buf: an other device (spec.md, Device rule)
		{"/dmabuf:cuda-ipc", "r--s", true, snapshot.ClassOther},
		{"/dmabuffer", "rw-s", false, ""},
	} {
		line := "1000-2000 " + tc.perms + " 00000000 00:05 10 " + tc.path + "\n"
		res := sc.ScanMaps([]byte(line))
		if got := len(res.Mappings) == 1; got != tc.device {
			t.Errorf("%s %s: device=%v, want %v", tc.path, tc.perms, got, tc.device)
			continue
		}
		if tc.device && res.Mappings[0].Class != tc.class {
			t.Errorf("%s: class %s, want %s", tc.path, res.Mappings[0].Class, tc.class)
		}
	}
}

func TestScanMapsSuspectAnon(t *testing.T) {
	var sc MapsScanner
	maps := "7f0000000000-7f0004000000 rwxp 00000000 00:00 0 \n" + // exactly 64 MiB: suspect
		"7f0004000000-7f0007fff000 rwxp 00000000 00:00 0 \n" + // just below
		"7f0010000000-7f0020000000 rw-p 00000000 00:00 0 \n" + // not executable
		"7f0020000000-7f0030000000 r-xp 00000000 00:00 0                          [anon:cuda]\n" +
		"7f0030000000-7f0040000000 r-xp 00000000 00:00 0                          [heap]\n" +
		"7f0040000000-7f0050000000 r-xp 00000000 fd:01 9 /usr/lib/big.so\n" +
		"7f0050000000-7f0060000000 rwxp 00000000 00:00 0                          [anon:jit/dev/x]\n"
	res := sc.ScanMaps([]byte(maps))
	if len(res.SuspectAnon) != 3 || res.SuspectAnon[0].Size != 64<<20 || res.SuspectAnon[1].Path != "[anon:cuda]" || res.SuspectAnon[2].Path != "[anon:jit/dev/x]" || len(res.Mappings) != 0 {
		t.Errorf("suspect anon %+v", res.SuspectAnon)
	}
}

func TestScanMapsMalformed(t *testing.T) {
	var sc MapsScanner
	maps := "1000-2000 rw-s 00000000 00:05 10 /dev/nvidia0\n" +
		"\n" +
		"only words here\n" +
		"1000-2000 rw-s\n" +
		"1000-2000 rw-s 00000000 00:05 1x /dev/nvidia1\n" +
		"3000-4000 rw-s 00000000 00:05 11 /dev/nvidia2" // no final newline
	res := sc.ScanMaps([]byte(maps))
	if len(res.Mappings) != 2 || res.Mappings[1].Path != "/dev/nvidia2" {
		t.Errorf("mappings %+v", res.Mappings)
	}
	want := []string{"maps line 2: ", "maps line 3: ", "maps line 4: ", "maps line 5: "}
	if len(res.Errors) != len(want) {
		t.Fatalf("errors %q", res.Errors)
	}
	for i, e := range res.Errors {
		if !strings.HasPrefix(e, want[i]) {
			t.Errorf("error %q, want prefix %q", e, want[i])
		}
	}
}

// FuzzParseMapsLine: no input panics the parser; what it accepts is
// consistent, and the scanner agrees with it on device lines.
func FuzzParseMapsLine(f *testing.F) {
	for _, seed := range []string{
		"7f2c0a200000-7f2c0a400000 rw-s 00000000 00:06 1043                       /dev/nvidia0",
		"7f564a29e000-7f564a2a1000 rw-p 00000000 00:00 0 ",
		"00400000-00452000 r-xp 00001000 fd:01 123 /opt/my app/x (deleted)",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		m, err := ParseMapsLine(line)
		if err != nil {
			return
		}
		if m.End < m.Start || !validPerms(m.Perms[:]) || bytes.HasPrefix(m.Path, []byte{' '}) {
			t.Fatalf("accepted inconsistent line %q: %+v", line, m)
		}
		rest := line
		if m.Deleted {
			if !bytes.HasSuffix(line, deletedSuffix) {
				t.Fatalf("deleted, but %q does not end in (deleted)", line)
			}
			rest = line[:len(line)-len(deletedSuffix)]
		}
		if !bytes.HasSuffix(rest, m.Path) {
			t.Fatalf("path %q is not the end of %q", m.Path, line)
		}
		if bytes.IndexByte(line, '\n') < 0 {
			var sc MapsScanner
			res := sc.ScanMaps(line)
			if len(res.Mappings) > 0 && res.Mappings[0].Path != string(m.Path) {
				t.Fatalf("scanner path %q, parser path %q", res.Mappings[0].Path, m.Path)
			}
		}
	})
}

// TestScanMapsMapFilesName: map_files names a mapping "%lx-%lx", without the
// zero padding maps gives low addresses; stat of the padded name is ENOENT,
// which would leave a low device mapping without its number.
func TestScanMapsMapFilesName(t *testing.T) {
	var names []string
	sc := MapsScanner{Stat: func(name, _ []byte, _, _ uint32, _ uint64) (snapshot.FileKind, bool) {
		names = append(names, string(name))
		return snapshot.FileKind{Device: true, Major: 7, Minor: 1}, true
	}}
	res := sc.ScanMaps([]byte("00200000-00210000 rw-s 00000000 fe:00 10 /srv/dev/nvidia0\n" +
		"08048000-08049000 r--s 00001000 fe:00 11 /srv/dev/nvidia1\n" +
		"7f2c0a200000-7f2c0a400000 rw-s 00000000 00:06 12 /dev/nvidia2\n" +
		"0-1000 r--s 00000000 00:06 13 /dev/nvidia3\n"))
	want := []string{"200000-210000", "8048000-8049000", "7f2c0a200000-7f2c0a400000", "0-1000"}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Errorf("stat of map_files %q, want %q", names, want)
	}
	if len(res.Mappings) != 4 || res.Mappings[0].Address != "00200000-00210000" || res.Mappings[0].DeviceNumber.String() != "7:1" {
		t.Errorf("mappings %+v", res.Mappings)
	}
}

// TestScanMapsShapes: the shapes real maps files have, 32-bit and 64-bit,
// through the scanner without stat: only the device lines come out, with
// their paths as the kernel wrote them.
func TestScanMapsShapes(t *testing.T) {
	long := "/srv/" + strings.Repeat("a", 4000) + "/dev/nvidia3"
	maps := "08048000-08049000 r-xp 00000000 08:01 131        /usr/bin/prog32\n" +
		"0804a000-0806b000 rw-p 00000000 00:00 0          [heap]\n" +
		"f7d00000-f7d10000 rw-s 00000000 00:06 1043       /dev/nvidia0\n" +
		"f7f00000-f7f02000 r-xp 00000000 00:00 0          [vdso]\n" +
		"ff8a0000-ff8c1000 rw-p 00000000 00:00 0          [stack]\n" +
		"7f0000000000-7f0000001000 rw-s 00000000 00:05 12 /srv/x/dev/nvidia  1 (deleted) (deleted)\n" +
		"7f0000001000-7f0000002000 r--s 00001000 00:05 13 " + long + "\n" +
		"7ffd1b5f0000-7ffd1b5f2000 r--p 00000000 00:00 0  [vvar]\n" +
		"ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0 [vsyscall]\n"
	var sc MapsScanner
	res := sc.ScanMaps([]byte(maps))
	if len(res.Errors) != 0 || len(res.SuspectAnon) != 0 || len(res.Mappings) != 3 {
		t.Fatalf("errors %q anon %d mappings %+v", res.Errors, len(res.SuspectAnon), res.Mappings)
	}
	m := res.Mappings
	if m[0].Address != "f7d00000-f7d10000" || m[0].Size != 0x10000 || m[0].Path != "/dev/nvidia0" || *m[0].GPUMinor != 0 {
		t.Errorf("32-bit mapping %+v", m[0])
	}
	if m[1].Path != "/srv/x/dev/nvidia  1 (deleted)" || !m[1].Deleted || m[1].GPUMinor != nil || m[1].Line() != "7f0000000000-7f0000001000 rw-s 00000000 00:05 12 /srv/x/dev/nvidia  1 (deleted) (deleted)" {
		t.Errorf("spaced, twice deleted mapping %+v", m[1])
	}
	if m[2].Path != long || m[2].Offset != 0x1000 || *m[2].GPUMinor != 3 {
		t.Errorf("long path mapping: offset %#x, path of %d bytes", m[2].Offset, len(m[2].Path))
	}
}

// TestScanMapsKnownSkipsParse: a line of a file Known says is no device is
// dismissed without Stat (nor a parse), wherever it lies in the maps; a
// file Known has not seen is stat'ed; a DMA-buf is kept by its name even
// where Known says its inode is no device; a device Known knows is still
// classified through Stat.
func TestScanMapsKnownSkipsParse(t *testing.T) {
	maps := strings.Join([]string{
		"1000-2000 r--p 00000000 fd:01 600 /usr/lib/libc.so.6", // known: no device
		"2000-3000 rw-s 00000000 00:05 1050 /dev/fb0",          // a renamed 195:5 node, known as a device
		"3000-4000 r--p 00000000 fd:01 600 /usr/lib/libc.so.6", // known again, after another file
		"4000-5000 r--p 00000000 fd:01 601 /usr/lib/libm.so.6", // not known: stat'ed
		"5000-6000 rw-s 00000000 00:0d 1090 /dmabuf:",          // DMA-buf: its name decides
		"bad line", // not a maps line: still said
	}, "\n") + "\n"
	known := map[uint64]snapshot.FileKind{600: {}, 1050: {Device: true, Char: true, Major: 195, Minor: 5}, 1090: {}}
	var statted []uint64
	sc := MapsScanner{
		Classes: ParseDevices([]byte("Character devices:\n195 nvidia-frontend\n")),
		Stat: func(_, _ []byte, _, _ uint32, inode uint64) (snapshot.FileKind, bool) {
			statted = append(statted, inode)
			if k, ok := known[inode]; ok {
				return k, true
			}
			return snapshot.FileKind{}, true
		},
		Known: func(_ []byte, major, minor uint32, inode uint64) (snapshot.FileKind, bool) {
			k, ok := known[inode]
			return k, ok && (major == 0xfd && minor == 1 || major == 0 && (minor == 5 || minor == 0xd))
		},
	}
	res := sc.ScanMaps([]byte(maps))
	var got []string
	for _, m := range res.Mappings {
		got = append(got, m.Path+" "+m.Class+" "+m.DeviceNumber.String())
	}
	if want := []string{"/dev/fb0 nvidia 195:5", "/dmabuf: other "}; !slices.Equal(got, want) {
		t.Errorf("mappings %q, want %q", got, want)
	}
	if want := []uint64{1050, 601, 1090}; !slices.Equal(statted, want) {
		t.Errorf("stat'ed inodes %v, want %v (libc is known)", statted, want)
	}
	if len(res.Errors) != 1 {
		t.Errorf("errors %q, want the bad line's", res.Errors)
	}
}

// TestScanMapsSameInodeOtherPath: two files under one maps dev field with one
// inode number (an overlay's two layers) in consecutive lines are two files:
// the second is stat'ed, and Known is asked by path.
func TestScanMapsSameInodeOtherPath(t *testing.T) {
	maps := "1000-2000 r--s 00000000 00:2f 5 /m/dev/lib.so\n" +
		"2000-3000 rw-s 00000000 00:2f 5 /m/dev/nvidia0\n"
	var known []string
	sc := MapsScanner{
		Stat: func(_, path []byte, _, _ uint32, _ uint64) (snapshot.FileKind, bool) {
			if strings.HasSuffix(string(path), "nvidia0") {
				return snapshot.FileKind{Device: true, Major: 7, Minor: 1}, true
			}
			return snapshot.FileKind{}, true
		},
		Known: func(path []byte, _, _ uint32, _ uint64) (snapshot.FileKind, bool) {
			known = append(known, string(path))
			return snapshot.FileKind{}, false
		},
	}
	res := sc.ScanMaps([]byte(maps))
	if len(res.Mappings) != 1 || res.Mappings[0].Path != "/m/dev/nvidia0" || res.Mappings[0].DeviceNumber.String() != "7:1" {
		t.Errorf("mappings %+v, want the node's alone", res.Mappings)
	}
	if want := []string{"/m/dev/lib.so", "/m/dev/nvidia0"}; !slices.Equal(known, want) {
		t.Errorf("Known asked for %q, want %q", known, want)
	}
}

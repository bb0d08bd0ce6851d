package procfs

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/snapshot"
)

// The parsers below read text a tenant or a stranger's proc root controls.
// Each fuzz target checks that a parser never panics and that what it
// accepts agrees with its input. scripts/fuzz.sh runs every target for a
// bounded time in CI; go test runs their seeds.

func FuzzParseStat(f *testing.F) {
	f.Add([]byte("4242 (python3) S 1 4242 4242 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 2 0 123456 1000 200\n"))
	f.Add([]byte("7 (a) b (c)) R 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 9 0 0"))
	f.Add([]byte("1 (x\ny) Z 0 0 0"))
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := ParseStat(data)
		if err != nil {
			return
		}
		open, end := bytes.IndexByte(data, '('), bytes.LastIndexByte(data, ')')
		if st.Comm != string(data[open+1:end]) {
			t.Fatalf("comm %q is not the text between the first ( and the last ) of %q", st.Comm, data)
		}
		if len(st.State) != 1 || st.PPID < 0 || st.PPID > 1<<31 || st.Threads < 0 || st.Session < 0 {
			t.Fatalf("accepted out-of-range fields %+v from %q", st, data)
		}
	})
}

func FuzzParseStatus(f *testing.F) {
	f.Add([]byte("Name:\tpython3\nUid:\t1000\t1000\t1000\t1000\nNSpid:\t4242\t1\n"))
	f.Add([]byte("Uid:\t0\t0\t0\t0"))
	f.Add([]byte("NSpid:\t1\nUid:\t1 x\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := ParseStatus(data)
		if err != nil {
			return
		}
		if !st.HasUID || !bytes.Contains(data, []byte("Uid:")) {
			t.Fatalf("accepted %q without a Uid line: %+v", data, st)
		}
		for _, id := range append([]int{st.UID, st.EUID}, st.NSpid...) {
			if id < 0 || id > 1<<32 {
				t.Fatalf("accepted id %d out of range from %q", id, data)
			}
		}
	})
}

func FuzzParseFdinfoFlags(f *testing.F) {
	f.Add([]byte("pos:\t0\nflags:\t0100002\nmnt_id:\t25\nino:\t1043\n"))
	f.Add([]byte("flags:\t03\n"))
	f.Add([]byte("flags: 99\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		flags, access, err := ParseFdinfoFlags(data)
		if err != nil {
			return
		}
		v, perr := strconv.ParseUint(flags, 8, 64)
		want, aerr := AccessMode(v)
		if perr != nil || aerr != nil || access != want {
			t.Fatalf("flags %q and access %q disagree (from %q)", flags, access, data)
		}
	})
}

func FuzzParseRingFiles(f *testing.F) {
	f.Add([]byte("SqMask:\t0x3\nUserFiles:\t3\n    0: /dev/nvidia0\n    2: /dev/a\\040b (deleted)\nUserBufs:\t0\n"))
	f.Add([]byte("UserFiles:\tx\n"))
	f.Add([]byte("UserFiles:\t1\n 0: \\1\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		slots, files, ok := ParseRingFiles(data)
		if !ok && (slots != 0 || files != nil) {
			t.Fatalf("no UserFiles line, yet %d slots and %d files from %q", slots, len(files), data)
		}
		for _, rf := range files {
			if len(rf.Path) > len(data) {
				t.Fatalf("unescaped path %q longer than the input %q", rf.Path, data)
			}
		}
	})
}

func FuzzParseDevices(f *testing.F) {
	f.Add([]byte("Character devices:\n  1 mem\n195 nvidia-frontend\n508 nvidia-uvm\n\nBlock devices:\n  7 loop\n509 nvidia-x\n"))
	f.Add([]byte("Character devices:\n99999999999 nvidia\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		dc := ParseDevices(data)
		for major, name := range dc.NVIDIAMajors {
			if major == snapshot.NVIDIAMajor || !strings.HasPrefix(name, "nvidia") {
				t.Fatalf("major %d named %q taken from %q", major, name, data)
			}
			if !bytes.Contains(data, []byte(strconv.FormatUint(uint64(major), 10))) {
				t.Fatalf("major %d is not in %q", major, data)
			}
		}
	})
}

func FuzzParseNetTable(f *testing.F) {
	header := "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
	f.Add([]byte(header+"   0: 0100007F:0D05 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000        0 4242 1 0\n"), "tcp")
	f.Add([]byte(header+"   0: 00000000000000000000000001000000:0D05 0000000000000000FFFF00000100007F:1F90 01 0 0 0 0 0 4242\n"), "tcp6")
	f.Add([]byte(header+"   0: 0100007F:0D05 00000000:0000 07 0 0 0 0 0 4242\n"), "udp")
	f.Fuzz(func(t *testing.T, data []byte, proto string) {
		want := map[uint64]bool{4242: true}
		socks, bad := ParseNetTable(data, proto, 7, want, nil)
		if bad < 0 || bad+len(socks) > bytes.Count(data, []byte{'\n'})+1 {
			t.Fatalf("%d sockets and %d bad lines from %d lines", len(socks), bad, bytes.Count(data, []byte{'\n'})+1)
		}
		for _, s := range socks {
			_, lerr := netip.ParseAddrPort(s.Local)
			_, rerr := netip.ParseAddrPort(s.Remote)
			if !want[s.Inode] || lerr != nil || rerr != nil || s.State == "" || s.Netns != 7 || s.Proto != proto {
				t.Fatalf("socket %+v from %q", s, data)
			}
		}
	})
}

func FuzzParseNetAddr(f *testing.F) {
	f.Add([]byte("0100007F:0D05"))
	f.Add([]byte("0000000000000000FFFF00000100007F:1F90"))
	f.Add([]byte("0100007F:"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ap, err := parseNetAddr(b)
		if err != nil {
			return
		}
		i := bytes.IndexByte(b, ':')
		port, perr := strconv.ParseUint(string(b[i+1:]), 16, 16)
		if perr != nil || uint64(ap.Port()) != port || !ap.Addr().IsValid() {
			t.Fatalf("%q read as %v", b, ap)
		}
		if i == 8 && !ap.Addr().Is4() {
			t.Fatalf("a 4-byte address %q read as %v", b, ap)
		}
	})
}

func FuzzParseBtime(f *testing.F) {
	f.Add([]byte("cpu  1 2 3\nbtime 1733130000\nprocesses 42\n"))
	f.Add([]byte("btime -1\n"))
	f.Add([]byte("btime 99999999999999999999\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		n, err := ParseBtime(data)
		if err == nil && (n < 0 || n > 1<<40) {
			t.Fatalf("boot time %d out of range from %q", n, data)
		}
	})
}

func FuzzParseCmdline(f *testing.F) {
	f.Add("python3\x00train.py\x00--lr\x00")
	f.Add("setproctitle without NULs")
	f.Add("\x00\x00")
	f.Fuzz(func(t *testing.T, text string) {
		args := ParseCmdline(text)
		if got, want := strings.Join(args, "\x00"), strings.TrimSuffix(text, "\x00"); got != want {
			t.Fatalf("arguments %q do not join back to %q", args, want)
		}
	})
}

func FuzzDeviceMinor(f *testing.F) {
	f.Add([]byte("Model: \t\t NVIDIA H100\nIRQ:   \t\t 0\nDevice Minor: \t 3\n"))
	f.Add([]byte("Device Minor: -1\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		n, ok := DeviceMinor(data)
		if ok && (n < 0 || !bytes.Contains(data, []byte(strconv.Itoa(n)))) {
			t.Fatalf("minor %d from %q", n, data)
		}
	})
}

// FuzzScanMaps: a scan fed in pieces cut at line ends finds what a scan of
// the whole text finds, and stays within the bounds of one process's maps.
func FuzzScanMaps(f *testing.F) {
	f.Add([]byte("7f2c0a200000-7f2c0a400000 rw-s 00000000 00:06 1043 /dev/nvidia0\n7f00-7f10 r-xp 0 00:00 0 \nbad\n"), uint8(1))
	f.Add([]byte("1000-5001000 rwxp 00000000 00:00 0 [anon:jit]\n2000-3000 rw-s 0 00:05 7 /tmp/x (deleted)\n2000-3000 r--s 0 00:05 7 /tmp/x (deleted)"), uint8(2))
	f.Add([]byte("1000-2000 rw-s 00000000 00:05 1051 /dev/nvidia0\n2000-3000 rw-s 00000000 00:05 1052 /dev/nvidia1\n3000-4000 r--p 0 fd:01 9 /usr/lib/libc.so.6\n"), uint8(0))
	classes := ParseDevices([]byte("Character devices:\n195 nvidia-frontend\n508 nvidia-uvm\n"))
	// stat answers by inode: unreadable, an NVIDIA node, or a regular file.
	stat := func(_, _ []byte, _, _ uint32, inode uint64) (snapshot.FileKind, bool) {
		switch inode % 3 {
		case 0:
			return snapshot.FileKind{}, false
		case 1:
			return snapshot.FileKind{Device: true, Char: true, Major: 195, Minor: uint32(inode % 256)}, true
		}
		return snapshot.FileKind{}, true
	}
	f.Fuzz(func(t *testing.T, data []byte, cut uint8) {
		sc := MapsScanner{Classes: classes, Stat: stat}
		whole := sc.ScanMaps(data)
		k := 0
		for range cut {
			i := bytes.IndexByte(data[k:], '\n')
			if i < 0 {
				break
			}
			k += i + 1
		}
		sc.Begin()
		sc.Feed(data[:k])
		sc.Feed(data[k:])
		if pieces := sc.End(); !reflect.DeepEqual(whole, pieces) {
			t.Fatalf("cut after byte %d of %q:\nwhole  %+v\npieces %+v", k, data, whole, pieces)
		}
		if len(whole.Mappings) > 4*snapshot.MappingsPerDevice+(MaxRuns+1)*16 || len(whole.Runs) > MaxRuns+1 ||
			len(whole.SuspectAnon) > snapshot.MappingsPerDevice || len(whole.Errors) > MaxMapsErrors+1 {
			t.Fatalf("%d mappings, %d runs, %d suspect, %d errors from %q", len(whole.Mappings), len(whole.Runs), len(whole.SuspectAnon), len(whole.Errors), data)
		}
		for _, m := range whole.Mappings {
			if !bytes.Contains(data, []byte(m.Path)) || m.Class == "" {
				t.Fatalf("mapping %+v is not in %q", m, data)
			}
		}
	})
}

// FuzzParseCgroup: the lines are the text's, and each owner id stands in
// the directory it names, in a hierarchy the text has.
func FuzzParseCgroup(f *testing.F) {
	hex := strings.Repeat("c0ffee00", 8)
	f.Add("0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podaa_bb.slice/cri-containerd-" + hex + ".scope\n")
	f.Add("12:pids:/docker/" + hex + "\n4:memory:/slurm/uid_1000/job_42/step_0\n0::/system.slice/ssh.service\n")
	f.Add("0::/system.slice/slurmstepd.scope/job_7/step_0/user/task_0\n1:name=systemd:/kubelet/kubepods/podx/" + hex)
	f.Fuzz(func(t *testing.T, data string) {
		lines, a := ParseCgroup(data)
		if strings.Join(lines, "\n") != strings.TrimRight(data, "\n") {
			t.Fatalf("lines %q are not the text %q", lines, data)
		}
		for _, o := range []struct {
			id  string
			dir OwnerDir
			ok  bool
		}{
			{a.ContainerID, a.Dirs.Container, isHex64(a.ContainerID) && strings.Contains(a.Dirs.Container.Path, a.ContainerID)},
			{a.PodUID, a.Dirs.Pod, a.Dirs.Pod.Path != ""},
			{a.SlurmJobID, a.Dirs.SlurmJob, isDigits(a.SlurmJobID) && strings.HasSuffix(a.Dirs.SlurmJob.Path, "/job_"+a.SlurmJobID)},
		} {
			if o.id == "" && o.dir != (OwnerDir{}) || o.id != "" && !o.ok {
				t.Fatalf("id %q in directory %+v from %q", o.id, o.dir, data)
			}
			if o.id != "" && (!strings.Contains(data, o.dir.Hierarchy+":") || !strings.Contains(data, strings.TrimLeft(o.dir.Path, "/"))) {
				t.Fatalf("directory %+v is not in %q", o.dir, data)
			}
		}
		if a.SystemdUnit != "" && !strings.Contains(data, a.SystemdUnit) {
			t.Fatalf("unit %q is not in %q", a.SystemdUnit, data)
		}
	})
}

// FuzzTableInodes: each inode found is one asked for, written in the table.
func FuzzTableInodes(f *testing.F) {
	f.Add([]byte("Num       RefCount Protocol Flags    Type St Inode Path\n0000000000000000: 00000002 00000000 00010000 0001 01 4242 /run/x.sock\n"), uint8(6))
	f.Add([]byte("sk       RefCnt Type Proto  Iface R Rmem   User   Inode\n0000000000000000 3      3    0003   2     1 0      0      18446744073709551615\n"), uint8(8))
	want := map[uint64]bool{1: true, 4242: true, 1<<64 - 1: true}
	f.Fuzz(func(t *testing.T, data []byte, field uint8) {
		for inode := range TableInodes(data, int(field%12), want) {
			if !want[inode] || !bytes.Contains(data, []byte(strconv.FormatUint(inode, 10))) {
				t.Fatalf("inode %d from field %d of %q", inode, field%12, data)
			}
		}
	})
}

// FuzzParseDec: a number is what strconv reads, of at most 20 digits.
func FuzzParseDec(f *testing.F) {
	f.Add([]byte("4242"))
	f.Add([]byte("18446744073709551616"))
	f.Add([]byte("+1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, ok := ParseDec(b)
		want, err := strconv.ParseUint(string(b), 10, 64)
		if ok != (err == nil && len(b) <= 20) || ok && v != want {
			t.Fatalf("%q read as %d, %v (strconv %d, %v)", b, v, ok, want, err)
		}
	})
}

// FuzzDirentInts: of directory entries encoded as getdents64 writes them,
// the numbers kept are the names that are canonical decimals in range, and
// the other names that start with a digit are named, the first few.
func FuzzDirentInts(f *testing.F) {
	f.Add("./../self/1/4242/04242/4194304/sys/0/12x")
	f.Add("1/2/3")
	f.Fuzz(func(t *testing.T, names string) {
		var buf []byte
		var want []int
		var bad []string
		for name := range strings.SplitSeq(names, "/") {
			if name == "" || len(name) > 255 || strings.IndexByte(name, 0) >= 0 {
				continue
			}
			reclen := (19 + len(name) + 1 + 7) &^ 7
			rec := make([]byte, reclen)
			binary.LittleEndian.PutUint16(rec[16:], uint16(reclen))
			copy(rec[19:], name)
			buf = append(buf, rec...)
			if v, err := strconv.ParseUint(name, 10, 64); err == nil && v >= 1 && v < PIDMax && strconv.FormatUint(v, 10) == name {
				want = append(want, int(v))
			} else if name[0] >= '0' && name[0] <= '9' && len(bad) < 8 {
				bad = append(bad, name)
			}
		}
		r := NewReader(nil, false, false)
		if got := r.appendDirentInts(buf, nil, 1, PIDMax-1); !slices.Equal(got, want) || !slices.Equal(r.BadNames, bad) {
			t.Fatalf("from %q kept %v and named %q, want %v and %q", names, got, r.BadNames, want, bad)
		}
	})
}

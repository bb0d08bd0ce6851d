package procfs

import (
	"bytes"
	"net/netip"
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

package procfs

import (
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/snapshot"
)

func TestParseStat(t *testing.T) {
	tail := " 0 0 0 0 0 0 0 0 20 0 1 0 123456 0 0\n"
	st, err := ParseStat([]byte("4242 (evil) S 1 (x) R) S 77 4242 4242 0 -1 4194560" + tail))
	if err != nil || st.Comm != "evil) S 1 (x) R" || st.PPID != 77 || st.StartTime != 123456 || st.Flags != 4194560 {
		t.Errorf("comm with parentheses: %+v %v", st, err)
	}
	st, err = ParseStat([]byte("2 (kthreadd) S 0 0 0 0 -1 2129984" + tail))
	if err != nil || st.Flags&PFKthread == 0 {
		t.Errorf("kthreadd flags: %+v %v", st, err)
	}
	st, err = ParseStat([]byte("9 (a\nb\x1b[0m) S 1 9 9 0 -1 0" + tail))
	if err != nil || st.Comm != "a\nb\x1b[0m" {
		t.Errorf("hostile comm: %q %v", st.Comm, err)
	}
	// A zombie: exited, not reaped. Field 20 counts its threads.
	st, err = ParseStat([]byte("7777 (python3) Z 2100 7777 7777 0 -1 4227084 0 0 0 0 0 0 0 0 20 0 1 0 700 0 0\n"))
	if err != nil || st.State != "Z" || st.Threads != 1 || st.PPID != 2100 || st.StartTime != 700 {
		t.Errorf("zombie: %+v %v", st, err)
	}
	if st, err := ParseStat([]byte("8 (w) t 1 8 8 0 -1 0 0 0 0 0 0 0 0 0 20 0 12 0 9 0 0\n")); err != nil || st.State != "t" || st.Threads != 12 {
		t.Errorf("traced, 12 threads: %+v %v", st, err)
	}
	for _, bad := range []string{"", "1 comm S 1", "1 (c) S 1 2 3", "1 (c) S x 1 1 0 -1 0" + tail, "1 (c) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 -5 0\n", "1 (c)S 1",
		"1 (c) 5 1 1 1 0 -1 0" + tail, "1 (c) SZ 1 1 1 0 -1 0" + tail, "1 (c) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 x 0 5 0\n"} {
		if _, err := ParseStat([]byte(bad)); err == nil {
			t.Errorf("%q parsed", strings.TrimSpace(bad))
		}
	}
}

func TestDefunct(t *testing.T) {
	for _, tc := range []struct {
		state   string
		threads int
		want    bool
	}{
		{"Z", 1, true},
		{"Z", 0, true}, // threads unknown
		{"X", 1, true},
		{"Z", 3, false}, // the leader exited, its other threads run
		{"S", 1, false},
		{"R", 8, false},
		{"", 0, false}, // a snapshot from before gpusnap kept the state
	} {
		p := snapshot.Process{State: tc.state, Threads: tc.threads}
		if p.Defunct() != tc.want {
			t.Errorf("state %q with %d threads: Defunct() = %v", tc.state, tc.threads, !tc.want)
		}
	}
}

func TestParseStatus(t *testing.T) {
	st, err := ParseStatus([]byte("Name:\tx\nUid:\t1001\t0\t0\t0\nGid:\t0\t0\t0\t0\nNSpid:\t5000\t7\t1\n"))
	if err != nil || st.UID != 1001 || st.EUID != 0 || len(st.NSpid) != 3 || st.NSpid[2] != 1 {
		t.Errorf("%+v %v", st, err)
	}
	// Kernels before 4.1 have no NSpid line.
	if st, err := ParseStatus([]byte("Uid:\t0\t0\t0\t0\n")); err != nil || st.NSpid != nil {
		t.Errorf("no NSpid: %+v %v", st, err)
	}
	for _, bad := range []string{"", "Name:\tx\n", "Uid:\tx\t0\t0\t0\n", "Uid:\t0\n", "Uid:\t0\t0\t0\t0\nNSpid:\tz\n"} {
		if _, err := ParseStatus([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestParseCmdline(t *testing.T) {
	for in, want := range map[string][]string{
		"":                    nil,
		"a\x00b c\x00":        {"a", "b c"},
		"setproctitle no nul": {"setproctitle no nul"},
		"a\x00\x00b\x00":      {"a", "", "b"},
	} {
		if got := ParseCmdline(in); strings.Join(got, "|") != strings.Join(want, "|") || len(got) != len(want) {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

func TestParseFdinfoFlags(t *testing.T) {
	for in, want := range map[string]string{
		"pos:\t0\nflags:\t0100000\nmnt_id:\t25\n": "r",
		"pos:\t0\nflags:\t01\n":                   "w",
		"flags:\t02100002\n":                      "rw",
	} {
		flags, access, err := ParseFdinfoFlags([]byte(in))
		if err != nil || access != want || flags == "" {
			t.Errorf("%q: %q %q %v, want %s", in, flags, access, err, want)
		}
	}
	for _, bad := range []string{"", "pos:\t0\n", "flags:\t9\n", "flags:\t03\n"} {
		if _, _, err := ParseFdinfoFlags([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

package capture

import (
	"strings"
	"testing"
)

// The BPF path renders kernel fields as /proc's text would show them.
func TestTaskState(t *testing.T) {
	for _, c := range []struct {
		state, exit uint32
		want        string
	}{
		{0, 0, "R"},
		{0x1, 0, "S"},
		{0x2, 0, "D"},
		{0x4, 0, "T"},
		{0x8, 0, "t"},
		{0x80, 0x10, "X"},    // TASK_DEAD, EXIT_DEAD
		{0x80, 0x20, "Z"},    // TASK_DEAD, EXIT_ZOMBIE
		{0x40, 0, "P"},       // TASK_PARKED
		{0x402, 0, "I"},      // TASK_IDLE
		{0x1000, 0, "D"},     // TASK_RTLOCK_WAIT shows as a lock wait
		{0x8000 | 1, 0, "D"}, // TASK_FROZEN shows as uninterruptible
		{0x102, 0, "D"},      // TASK_KILLABLE
	} {
		if got := taskState(c.state, c.exit); got != c.want {
			t.Errorf("taskState(%#x, %#x) = %q, want %q", c.state, c.exit, got, c.want)
		}
	}
}

func TestVMPermsAndRange(t *testing.T) {
	for flags, want := range map[uint32]string{0: "---p", 0x1: "r--p", 0x3: "rw-p", 0x5: "r-xp", 0x83: "rw-s", 0x80 | 0x8: "---s"} {
		if got := vmPerms(flags); string(got[:]) != want {
			t.Errorf("vmPerms(%#x) = %q, want %q", flags, got, want)
		}
	}
	// maps pads addresses to 8 hex digits, and no further.
	if got, want := mapsRange(0x400000, 0x401000), "00400000-00401000"; got != want {
		t.Errorf("mapsRange = %q, want %q", got, want)
	}
	if got, want := mapsRange(0x7f2c0a200000, 0x7f2c0a400000), "7f2c0a200000-7f2c0a400000"; got != want {
		t.Errorf("mapsRange = %q, want %q", got, want)
	}
}

func TestKernelDevice(t *testing.T) {
	// i_rdev keeps the major above bit 20: 195:0 is (195<<20)|0.
	k := kernelDevice(0o20666, 195<<20|3)
	if !k.Device || !k.Char || k.Major != 195 || k.Minor != 3 {
		t.Errorf("char 195:3 decoded as %+v", k)
	}
	if k := kernelDevice(0o60660, 7<<20|0x12345); !k.Device || k.Char || k.Major != 7 || k.Minor != 0x12345 {
		t.Errorf("block 7:74565 decoded as %+v", k)
	}
	if k := kernelDevice(0o100644, 0); k.Device {
		t.Errorf("a regular file decoded as a device: %+v", k)
	}
}

func TestBPFUnavailable(t *testing.T) {
	if why := bpfUnavailable("/srv/fixture/proc"); why == "" {
		t.Error("a --proc-root fixture was offered the BPF path, which reads the live kernel")
	}
}

// nvidiaFirst orders NVIDIA entries first, each side in its order, and
// leaves a list already so as it is.
func TestNvidiaFirst(t *testing.T) {
	isN := func(s string) bool { return s[0] == 'n' }
	for in, want := range map[string]string{
		"":          "",
		"o1":        "o1",
		"n1 n2":     "n1 n2",
		"n1 o1 o2":  "n1 o1 o2",
		"o1 n1 o2":  "n1 o1 o2",
		"o1 n1 n2":  "n1 n2 o1",
		"n1 o1 n2":  "n1 n2 o1",
		"o1 o2 n1 ": "n1 o1 o2",
	} {
		if got := strings.Join(nvidiaFirst(strings.Fields(in), isN), " "); got != strings.TrimSpace(want) {
			t.Errorf("nvidiaFirst(%q) = %q, want %q", in, got, want)
		}
	}
}

package procfs

import "testing"

func TestParseDevices(t *testing.T) {
	dc := ParseDevices([]byte("Character devices:\n  1 mem\n195 nvidia-frontend\n226 drm\n506 nvidia-nvswitch\n507 nvidia-caps\n508 nvidia-uvm\n509 nvidia-caps-imex-channels\n\nBlock devices:\n  7 loop\n510 nvidia-not-a-char\n"))
	want := map[uint32]string{506: "nvidia-nvswitch", 507: "nvidia-caps", 508: "nvidia-uvm", 509: "nvidia-caps-imex-channels"}
	if len(dc.NVIDIAMajors) != len(want) {
		t.Errorf("majors %v, want %v", dc.NVIDIAMajors, want)
	}
	for k, v := range want {
		if dc.NVIDIAMajors[k] != v {
			t.Errorf("major %d = %q, want %q", k, dc.NVIDIAMajors[k], v)
		}
	}
}

// Registered says whether the driver's module is loaded: major 195 alone is
// enough, and a block device named nvidia is not the driver's.
func TestParseDevicesRegistered(t *testing.T) {
	for text, want := range map[string]bool{
		"Character devices:\n195 nvidia-frontend\n\nBlock devices:\n  7 loop\n":  true,
		"Character devices:\n  1 mem\n226 drm\n\nBlock devices:\n510 nvidia-x\n": false,
		"": false,
	} {
		if got := ParseDevices([]byte(text)).Registered; got != want {
			t.Errorf("%q: registered %v, want %v", text, got, want)
		}
	}
}

package snapshot

import "testing"

// TestClassify is the device rule of docs/spec.md, case by case: the one
// classifier every stage trusts.
func TestClassify(t *testing.T) {
	// As the capture parses /proc/devices with 508 nvidia-uvm in it.
	dc := DeviceClasses{NVIDIAMajors: map[uint32]string{508: "nvidia-uvm"}}
	for _, tc := range []struct {
		path  string
		kind  FileKind
		known bool
		class string
		gpu   int // -1: none
	}{
		{"/dev/nvidia7", FileKind{}, false, ClassNVIDIA, 7},
		{"/dev/nvidiactl", FileKind{Device: true, Char: true, Major: 195, Minor: 255}, true, ClassNVIDIA, -1},
		{"/dev/nvidia-modeset", FileKind{Device: true, Char: true, Major: 195, Minor: 254}, true, ClassNVIDIA, 254}, // spec.md, Device rule: a minor below 255 names GPU N; none has 254
		{"/dev/gpu", FileKind{Device: true, Char: true, Major: 508, Minor: 0}, true, ClassNVIDIA, -1},
		{"/dev/nvidia0", FileKind{Device: true, Major: 7, Minor: 3}, true, ClassNVIDIA, 0}, // a loop node named nvidia0
		{"/dev/nvidia-1", FileKind{}, false, ClassNVIDIA, -1},
		{"/dev/nvidia-caps/nvidia-cap1", FileKind{}, false, ClassNVIDIA, -1}, // in the /dev tree, not a dev directory
		{"/srv/x/dev/nvidia3", FileKind{}, false, ClassNVIDIA, 3},            // a container's /dev
		{"/srv/x/nvidia3", FileKind{}, false, ClassOther, -1},
		{"/tmp/rn/gpu", FileKind{Device: true, Char: true, Major: 195, Minor: 2}, true, ClassNVIDIA, 2}, // renamed: the number wins
		{"/dev/nvidia+1", FileKind{}, false, ClassNVIDIA, -1},
		{"/dev/null", FileKind{Device: true, Char: true, Major: 1, Minor: 3}, true, ClassOther, -1},
		{"/dev/sda", FileKind{Device: true, Major: 195, Minor: 0}, true, ClassOther, -1}, // block 195 is not NVIDIA's
	} {
		class, gpu := dc.Classify(tc.path, tc.kind, tc.known)
		g := -1
		if gpu != nil {
			g = *gpu
		}
		if class != tc.class || g != tc.gpu {
			t.Errorf("%s %+v: %s gpu %d, want %s gpu %d", tc.path, tc.kind, class, g, tc.class, tc.gpu)
		}
	}
}

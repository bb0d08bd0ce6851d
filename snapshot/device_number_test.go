package snapshot

import (
	"encoding/json"
	"testing"
)

// A device number marshals to the "195:0" string snapshots always held, and
// reads back; unknown is left out.
func TestDeviceNumberJSON(t *testing.T) {
	b, err := json.Marshal(Holder{FD: 3, Target: "/dev/nvidia0", DeviceNumber: DeviceNumber{195, 0}, Class: ClassNVIDIA})
	if err != nil || string(b) != `{"fd":3,"target":"/dev/nvidia0","device_number":"195:0","class":"nvidia"}` {
		t.Fatalf("%s %v", b, err)
	}
	var h Holder
	if err := json.Unmarshal(b, &h); err != nil || h.DeviceNumber != (DeviceNumber{195, 0}) {
		t.Errorf("read back %+v %v", h, err)
	}
	if b, _ := json.Marshal(Holder{Class: ClassOther}); string(b) != `{"fd":0,"target":"","class":"other"}` {
		t.Errorf("unknown number written: %s", b)
	}
	for _, bad := range []string{`"195"`, `"195:"`, `"-1:0"`, `"195:0:1"`, `"a:b"`, `"4294967296:0"`, `7`} {
		if err := json.Unmarshal([]byte(`{"device_number":`+bad+`}`), &h); err == nil {
			t.Errorf("%s read", bad)
		}
	}
}

package snapshot

import (
	"fmt"
	"strconv"
	"strings"
)

// DeviceNumber is a device's own number as stat gives it (st_rdev), which
// names the device whatever its path. It travels in JSON as "MAJOR:MINOR" in
// decimal ("195:0"). The zero value means unknown (no device has major 0) and
// is left out of JSON.
type DeviceNumber struct {
	Major, Minor uint32
}

// IsZero reports whether the number is unknown.
func (d DeviceNumber) IsZero() bool { return d == DeviceNumber{} }

// String is "MAJOR:MINOR", or "" when unknown.
func (d DeviceNumber) String() string {
	if d.IsZero() {
		return ""
	}
	return strconv.FormatUint(uint64(d.Major), 10) + ":" + strconv.FormatUint(uint64(d.Minor), 10)
}

// MarshalText writes String.
func (d DeviceNumber) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText reads "MAJOR:MINOR" in decimal, or "" for unknown.
func (d *DeviceNumber) UnmarshalText(b []byte) error {
	*d = DeviceNumber{}
	if len(b) == 0 {
		return nil
	}
	maj, mnr, ok := strings.Cut(string(b), ":")
	if ok && digits(maj) && digits(mnr) {
		a, err1 := strconv.ParseUint(maj, 10, 32)
		m, err2 := strconv.ParseUint(mnr, 10, 32)
		if err1 == nil && err2 == nil {
			*d = DeviceNumber{Major: uint32(a), Minor: uint32(m)}
			return nil
		}
	}
	return fmt.Errorf("device number %q: want MAJOR:MINOR in decimal", b)
}

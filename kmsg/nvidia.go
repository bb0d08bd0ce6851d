package kmsg

import (
	"strconv"
	"strings"

	"github.com/gpusnap/gpusnap/internal/lazyregexp"
)

// Xid is an error the NVIDIA driver logged for a GPU (Xid) or an NVSwitch
// (SXid), as the driver words it:
//
//	NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python3, GPU has fallen off the bus.
//	nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 20034, Fatal, Link 30 LTSSM Fault Up
type Xid struct {
	Switch bool   `json:"switch,omitempty"` // an SXid, of an NVSwitch
	Number int    `json:"number"`
	PCI    string `json:"pci"` // the bus id as the driver printed it
	// PID and Name are the process the driver blamed, where it named one.
	// Drivers before R470 never do, and pid='<unknown>' gives 0.
	PID  int    `json:"pid,omitempty"`
	Name string `json:"name,omitempty"`
	// Fatal is an SXid's own verdict ("Fatal" or "Non-fatal"). Xids carry none.
	Fatal   bool   `json:"fatal,omitempty"`
	Message string `json:"message"` // the rest of the text
}

var (
	// Drivers since R470 print "PCI:" before the bus id, and older ones do not.
	xidRE  = lazyregexp.New(`^NVRM: Xid \((?:PCI:)?([0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{1,2}:[0-9A-Fa-f]{1,2}(?:\.[0-7])?)\): (\d{1,6}),? ?(.*)$`)
	sxidRE = lazyregexp.New(`^nvidia-nvswitch\d+: SXid \((?:PCI:)?([0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{1,2}:[0-9A-Fa-f]{1,2}(?:\.[0-7])?)\): (\d{1,6}),? ?(.*)$`)
	// driverRE is the NVIDIA driver's voice. It matches its resource
	// manager's "NVRM:" prefix, a kernel module's own prefix
	// (nvidia-nvswitch0:, nvidia-uvm:, nvidia-modeset:), or an Xid anywhere in
	// the text.
	driverRE = lazyregexp.New(`NVRM:|(?:^|\s)nvidia(?:-[a-z0-9]+)?:|S?Xid \((?:PCI:)?[0-9A-Fa-f]`)
)

// ParseXid reads an Xid or SXid record's text. It does not look at the
// record's facility, so a caller that trusts the result checks the record
// came from the kernel (see FromKernel).
func ParseXid(text string) (Xid, bool) {
	x := Xid{}
	m := xidRE().FindStringSubmatch(text)
	if m == nil {
		if m = sxidRE().FindStringSubmatch(text); m == nil {
			return x, false
		}
		x.Switch = true
	}
	x.PCI = m[1]
	x.Number, _ = strconv.Atoi(m[2]) // at most 6 digits, so it always fits
	rest := m[3]
	if x.Switch {
		switch {
		case strings.HasPrefix(rest, "Fatal,"):
			x.Fatal, rest = true, strings.TrimPrefix(rest[len("Fatal,"):], " ")
		case strings.HasPrefix(rest, "Non-fatal,"):
			rest = strings.TrimPrefix(rest[len("Non-fatal,"):], " ")
		}
		x.Message = rest
		return x, true
	}
	// pid= comes before name=, so a process name holding ", pid=" cannot
	// stand in for the driver's PID.
	if v, after, ok := field(rest, "pid="); ok {
		x.PID, _ = strconv.Atoi(strings.Trim(v, "'"))
		rest = after
	}
	if v, after, ok := field(rest, "name="); ok {
		if v != "<unknown>" {
			x.Name = v
		}
		rest = after
	}
	x.Message = rest
	return x, true
}

// field cuts "KEY=VALUE, " from the start of s.
func field(s, key string) (value, rest string, ok bool) {
	if !strings.HasPrefix(s, key) {
		return "", s, false
	}
	value, rest, found := strings.Cut(s[len(key):], ", ")
	if !found {
		return strings.TrimSuffix(value, ","), "", true
	}
	return value, rest, true
}

// IsDriverText reports whether text speaks in the NVIDIA driver's voice.
func IsDriverText(text string) bool { return driverRE().MatchString(text) }

// FromKernel reports whether the kernel wrote the record, as only its
// records have facility kern. What user space writes to /dev/kmsg gets
// LOG_USER, or the non-zero facility the writer asks for, never kern.
func (r *Record) FromKernel() bool { return r.Facility == FacilityKern }

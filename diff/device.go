package diff

import (
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/gpusnap/gpusnap/snapshot"
)

// renamed reports whether an NVIDIA device hides behind a path whose last
// element does not start with "nvidia". Capture classed it by its device
// number, which alone gives it away.
func renamed(class string, devno snapshot.DeviceNumber, p string) bool {
	return !devno.IsZero() && class == snapshot.ClassNVIDIA && !strings.HasPrefix(path.Base(p), "nvidia")
}

// withDeleted renders a path as the kernel does, marked when the node was
// deleted. Findings group by the bare path, since a node deleted and made again
// (a driver reload) still names the same device, and the evidence lines show
// the mark.
func withDeleted(p string, deleted bool) string {
	if deleted {
		return p + " (deleted)"
	}
	return p
}

// deviceUse is every mapping and holder one process has of one device.
type deviceUse struct {
	device   string
	devno    snapshot.DeviceNumber
	devType  string
	class    string
	gpuMinor *int
	mappings []snapshot.Mapping
	holders  []snapshot.Holder
	// accelKind is the accelerator node kind (snapshot.NodeX) of a use of
	// another vendor's accelerator, and accelWork whether the process did
	// work there (accel.go).
	accelKind string
	accelWork bool
	// accelDevs name the accelerators (snapshot.Accelerator.Name) the use
	// is on, its node's device or, for KFD, each GPU the process holds
	// memory on.
	accelDevs []string
}

// deviceUses groups a process's device mappings and NVIDIA holders (and,
// where ax indexes accelerators, their nodes' holders) by device (useKey),
// in order of appearance, so a finding is raised once per device, not per
// maps line. Other holders raise nothing (every process holds /dev/null)
// and are left out, so most processes have no uses.
func deviceUses(p *snapshot.Process, ax *accelIndex) []*deviceUse {
	if len(p.Mappings) == 0 && !hasNVIDIAHolder(p) && !hasAccelHolder(p, ax) {
		return nil
	}
	byDev := make(map[string]*deviceUse)
	var order []*deviceUse
	get := func(dev string, devno snapshot.DeviceNumber, devType, class string, minor *int) *deviceUse {
		u := byDev[useKey(dev, minor)]
		if u == nil {
			u = &deviceUse{device: dev, devno: devno, devType: devType, class: class, gpuMinor: minor}
			byDev[u.key()] = u
			order = append(order, u)
		}
		if u.devno.IsZero() {
			u.devno, u.devType = devno, devType
		}
		if class == snapshot.ClassNVIDIA {
			u.class = class
		}
		return u
	}
	for _, m := range p.Mappings {
		u := get(m.Path, m.DeviceNumber, m.DeviceType, m.Class, m.GPUMinor)
		u.mappings = append(u.mappings, m)
	}
	for _, h := range p.Holders {
		if h.Class != snapshot.ClassNVIDIA && (ax == nil || !ax.accelHolder(&h)) {
			continue
		}
		u := get(h.Target, h.DeviceNumber, h.DeviceType, h.Class, h.GPUMinor)
		u.holders = append(u.holders, h)
	}
	if ax != nil {
		ax.markAccel(p, order)
	}
	return order
}

func hasAccelHolder(p *snapshot.Process, ax *accelIndex) bool {
	if ax == nil {
		return false
	}
	for i := range p.Holders {
		if ax.accelHolder(&p.Holders[i]) {
			return true
		}
	}
	return false
}

// useKey names one device of a process by its path and the GPU it names. One
// path can be two GPUs (a tenant's mount namespace binds /dev/nvidia1 over its
// /dev/nvidia0), which the device numbers capture classed them by tell apart.
func useKey(dev string, minor *int) string {
	if minor == nil {
		return dev
	}
	return dev + "\x00" + strconv.Itoa(*minor)
}

func (u *deviceUse) key() string { return useKey(u.device, u.gpuMinor) }

func hasNVIDIAHolder(p *snapshot.Process) bool {
	for _, h := range p.Holders {
		if h.Class == snapshot.ClassNVIDIA {
			return true
		}
	}
	return false
}

// nvidia reports whether the use is of an NVIDIA device.
func (u *deviceUse) nvidia() bool { return u.class == snapshot.ClassNVIDIA }

// writableMapping reports whether any mapping of the device can be written through.
func (u *deviceUse) writableMapping() bool {
	for _, m := range u.mappings {
		if m.Writable() {
			return true
		}
	}
	return false
}

// writableHolder reports whether any descriptor on the device was opened for writing.
func (u *deviceUse) writableHolder() bool {
	for _, h := range u.holders {
		if h.Writable() {
			return true
		}
	}
	return false
}

// mappingEvidence renders each mapping as its maps line, with the device's own
// number where capture could read it.
func mappingEvidence(ms []snapshot.Mapping) []string {
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		line := "maps: " + m.Line()
		if !m.DeviceNumber.IsZero() {
			line += " [device " + m.DeviceType + " " + m.DeviceNumber.String() + "]"
		}
		out = append(out, line)
	}
	return out
}

// holderEvidence renders each holder as fuser and fdinfo would show it.
func holderEvidence(hs []snapshot.Holder) []string {
	out := make([]string, 0, len(hs))
	for _, h := range hs {
		line := "fd " + strconv.Itoa(h.FD) + " -> " + withDeleted(h.Target, h.Deleted)
		if h.Access != "" {
			line += " access " + h.Access
		}
		if h.Flags != "" {
			line += " flags " + h.Flags
		}
		if !h.DeviceNumber.IsZero() {
			line += " [device " + h.DeviceType + " " + h.DeviceNumber.String() + "]"
		}
		out = append(out, line)
	}
	return out
}

// deviceFinding builds a finding about one device a process uses, naming the
// process and whether it is new since FROM or changed.
func (c *comparison) deviceFinding(ch processChange, u *deviceUse, kind string, sev Severity, what string, evidence []string) Finding {
	ref := processRef(ch.proc)
	since := "a process new since FROM"
	if ch.before != nil {
		since = "alive at FROM without it"
	}
	return Finding{
		Kind:     kind,
		Severity: sev,
		Summary:  fmt.Sprintf("%s %s; %s", describe(ref), what, since),
		Process:  ref,
		Device:   u.device,
		GPUUUID:  c.gpuUUID(u.gpuMinor),
		Evidence: evidence,
	}
}

package snapshot

import "strconv"

// NVIDIAMajor is the fixed major of /dev/nvidia0..N, nvidiactl (195:255) and
// nvidia-modeset (195:254).
const NVIDIAMajor = 195

// nvidiactlMinor is 195:255, /dev/nvidiactl, the one minor of major 195 that
// names no GPU. docs/spec.md (Device rule) has every minor below it name GPU
// N, nvidia-modeset (195:254) included. No GPU has NVML minor 254, so that
// joins to no GPU.
const nvidiactlMinor = 255

// DeviceClasses decides whether a device is an NVIDIA device. The zero value
// knows only major 195 and the path rule.
type DeviceClasses struct {
	// NVIDIAMajors are the character majors registered by the NVIDIA driver
	// besides 195, from <proc-root>/devices.
	NVIDIAMajors map[uint32]string
	// Registered is true where <proc-root>/devices lists a character major
	// of the NVIDIA driver (195 or another), so its module is loaded.
	Registered bool
}

// Classify returns the class of a device at path (ClassNVIDIA or ClassOther)
// and the NVML minor of the GPU it names, if any. kind is stat's word on the
// node, where known. It is the one place gpusnap decides whether a device is
// NVIDIA's (docs/spec.md, Device rule), recorded by capture in each mapping
// and holder.
func (dc DeviceClasses) Classify(path string, kind FileKind, known bool) (string, *int) {
	byNumber := known && kind.Char && (kind.Major == NVIDIAMajor || dc.NVIDIAMajors[kind.Major] != "")
	dir, base := splitPath(path)
	// By name, nvidia* in a dev directory (a container's /dev, /srv/x/dev) or
	// anywhere in the /dev tree (/dev/nvidia-caps/nvidia-cap1).
	inDev := lastElem(dir) == "dev" || len(path) > 5 && path[:5] == "/dev/"
	byName := inDev && len(base) >= 6 && base[:6] == "nvidia"
	if !byNumber && !byName {
		return ClassOther, nil
	}
	// The device number is the truth where known, so a renamed 195:N node is GPU N.
	if known && kind.Char && kind.Major == NVIDIAMajor {
		if kind.Minor < nvidiactlMinor {
			n := int(kind.Minor)
			return ClassNVIDIA, &n
		}
		return ClassNVIDIA, nil
	}
	if byName && len(base) > 6 {
		if n, err := strconv.Atoi(base[6:]); err == nil && n >= 0 && base[6] != '+' {
			return ClassNVIDIA, &n
		}
	}
	return ClassNVIDIA, nil
}

// DevicePathRule is the path rule of docs/spec.md (Device rule) for a path
// whose file type cannot be read. It takes a node of the /dev tree or of any
// directory named dev, except /dev/shm, /dev/mqueue, /dev/hugepages and
// below, and the "/dev/zero (deleted)" name the kernel gives a shared
// anonymous mapping of /dev/zero.
func DevicePathRule(path []byte, deleted, shared bool) bool {
	p := string(path) // no allocation, as it is used only for comparisons
	if len(p) > 5 && p[:5] == "/dev/" {
		second, _, _ := cutSlash(p[5:])
		switch second {
		case "shm", "mqueue", "hugepages":
			return false
		}
		return !(p == "/dev/zero" && deleted && shared)
	}
	dir, base := splitPath(p)
	return base != "" && lastElem(dir) == "dev"
}

func cutSlash(s string) (before, after string, found bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == '/' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// splitPath splits at the last slash, "/dev/nvidia0" into "/dev" and "nvidia0".
func splitPath(p string) (dir, base string) {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			return p[:i], p[i+1:]
		}
	}
	return "", p
}

func lastElem(dir string) string {
	_, base := splitPath(dir)
	return base
}

// DeviceNumber renders a device's own number and type for the snapshot.
func (k FileKind) DeviceNumber() (number DeviceNumber, typ string) {
	typ = "block"
	if k.Char {
		typ = "char"
	}
	return DeviceNumber{Major: k.Major, Minor: k.Minor}, typ
}

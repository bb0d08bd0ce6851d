// Package accel reads the host's accelerators other than NVIDIA's from the
// kernel alone, with no vendor library. It reads DRM and accel devices from
// sysfs, KFD's tree for AMD compute, and each DRM client's memory and engine
// time from fdinfo (the kernel's drm-usage-stats keys). What each vendor
// gives is in its own file (amd.go, intel.go, habana.go).
package accel

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/gpusnap/gpusnap/snapshot"
)

// sysfs reads a directory laid out like /sys through an os.Root. A symbolic
// link is followed only while it stays inside the tree (sysfs's own links
// are relative and do), and only regular files are read, up to attrLimit, so
// a fixture tree cannot lead the reader out or make it block.
type sysfs struct {
	root *os.Root
}

// attrLimit bounds one sysfs attribute, of which the kernel writes at most a
// page.
const attrLimit = 64 << 10

func (s *sysfs) readText(name string) (string, error) {
	f, err := s.root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("%s: not a regular file", name)
	}
	data, err := io.ReadAll(io.LimitReader(f, attrLimit+1))
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	if len(data) > attrLimit {
		return "", fmt.Errorf("%s: longer than %d bytes", name, attrLimit)
	}
	return strings.TrimSpace(string(data)), nil
}

func (s *sysfs) readUint(name string) (uint64, error) {
	text, err := s.readText(name)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(text, 0, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is no number", name, text)
	}
	return n, nil
}

// list names the entries of a directory, sorted.
func (s *sysfs) list(name string) ([]string, error) {
	f, err := s.root.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	slices.Sort(names)
	return names, err
}

// link resolves the symbolic link name to a clean path inside the tree,
// relative to its root. It returns "" with an error for a link that leaves
// the tree.
func (s *sysfs) link(name string) (string, error) {
	target, err := s.root.Readlink(name)
	if err != nil {
		return "", err
	}
	if path.IsAbs(target) {
		return "", fmt.Errorf("%s: links to %s, out of the sys root", name, target)
	}
	full := path.Join(path.Dir(name), target)
	if full == ".." || strings.HasPrefix(full, "../") {
		return "", fmt.Errorf("%s: links to %s, out of the sys root", name, target)
	}
	return full, nil
}

func notExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }

// classes are the sysfs classes of accelerator nodes, and where their
// nodes lie under /dev.
var classes = []struct{ class, dev string }{
	{"class/drm", "/dev/dri/"},
	{"class/accel", "/dev/accel/"},
}

// Read reads the accelerators under sysRoot, nil when there is none but
// NVIDIA's. A sys root that cannot be opened is an error, and what cannot be
// read inside it is recorded in Errors.
func Read(sysRoot string) (*snapshot.Accelerators, error) {
	root, err := os.OpenRoot(sysRoot)
	if err != nil {
		return nil, fmt.Errorf("sys root: %w", err)
	}
	defer root.Close()
	s := &sysfs{root: root}
	a := &snapshot.Accelerators{SysRoot: sysRoot}
	byDir := map[string]int{} // device directory -> index in a.Devices
	for _, c := range classes {
		names, err := s.list(c.class)
		if err != nil {
			if !notExist(err) {
				a.Errors = append(a.Errors, c.class+": "+err.Error())
			}
			continue
		}
		for _, name := range names {
			if strings.ContainsRune(name, '-') || name == "version" {
				continue // a connector (card0-DP-1), or drm's version file
			}
			if err := s.addNode(a, byDir, c.class, c.dev, name); err != nil {
				a.Errors = append(a.Errors, c.class+"/"+name+": "+err.Error())
			}
		}
	}
	readKFD(s, a)
	nameDevices(a)
	if len(a.Devices) == 0 && a.KFDNode.IsZero() && len(a.KFDProcesses) == 0 && len(a.Errors) == 0 {
		return nil, nil // no accelerator but NVIDIA's, so the snapshot is as before
	}
	return a, nil
}

// addNode adds node name of class (its number in dev, its device through
// the device link) to the device it belongs to.
func (s *sysfs) addNode(a *snapshot.Accelerators, byDir map[string]int, class, devDir, name string) error {
	// The class entry links into the device's directory, relative to
	// which the device link lies.
	entry, err := s.link(class + "/" + name)
	if err != nil {
		return err
	}
	numText, err := s.readText(entry + "/dev")
	if err != nil {
		return err
	}
	node := snapshot.AccelNode{Path: devDir + name}
	if err := node.DeviceNumber.UnmarshalText([]byte(numText)); err != nil {
		return err
	}
	node.Kind = snapshot.AccelNodeKind(node.Path, node.DeviceNumber, snapshot.DeviceNumber{})
	dev, err := s.link(entry + "/device")
	if err != nil {
		return err
	}
	i, seen := byDir[dev]
	if !seen {
		d, skip := s.device(dev)
		if skip {
			return nil
		}
		a.Devices = append(a.Devices, d)
		i = len(a.Devices) - 1
		byDir[dev] = i
	}
	a.Devices[i].Nodes = append(a.Devices[i].Nodes, node)
	return nil
}

// device reads the device at dir, with its bus, vendor, driver and memory.
// skip says it is NVIDIA's, which NVML reads.
func (s *sysfs) device(dir string) (d snapshot.Accelerator, skip bool) {
	d.Name = path.Base(dir)
	if drv, err := s.link(dir + "/driver"); err == nil {
		d.Driver = path.Base(drv)
	}
	bus, _ := s.link(dir + "/subsystem")
	var v *vendor
	if path.Base(bus) == "pci" {
		d.PCISlot = d.Name
		id, err := s.readText(dir + "/vendor")
		if id == nvidiaPCIID {
			return d, true
		}
		if err != nil {
			d.Missing = "vendor: " + err.Error()
		}
		d.Vendor, v = id, vendorByPCI(id)
	}
	if v == nil {
		v = vendorByDriver(d.Driver)
	}
	switch {
	case v != nil:
		d.Vendor = v.name
	case d.Vendor == "":
		d.Vendor = cmp.Or(d.Driver, d.Name)
	}
	d.PerProcess = []string{"drm fdinfo"}
	if v == nil {
		return d, false
	}
	if v.missing != "" {
		d.Missing = v.missing
	}
	total, used, err := v.memory(s, dir)
	if err != nil {
		d.Missing = joinNote(d.Missing, "device memory: "+err.Error())
	}
	d.MemoryTotal, d.MemoryUsed = total, used
	return d, false
}

func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

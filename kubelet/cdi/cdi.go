// Package cdi reads this node's Container Device Interface specs, which
// drivers write for the runtime to inject a container's devices. It reads
// them for one thing, which GPUs a qualified CDI device name
// (vendor/class=name) gives, by the NVIDIA nodes its spec lists. DRA drivers name a claim's devices so
// (k8s.gpu.nvidia.com/claim=<claim uid>-gpu-0, a spec per claim).
package cdi

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/gpusnap/gpusnap/internal/safefile"
	"github.com/gpusnap/gpusnap/snapshot"
)

// DefaultSpecDirs are the directories runtimes read CDI specs from by
// default (containerd's and CRI-O's cdi_spec_dirs). Static specs are in
// /etc/cdi, and a driver's transient ones in /var/run/cdi.
var DefaultSpecDirs = []string{"/etc/cdi", "/var/run/cdi"}

// Bounds on what is read. A node holds a spec per prepared claim and a few
// base specs. A directory or file past these is not read further, and what
// it would have said is then not known.
const (
	maxSpecFiles = 4096
	maxSpecSize  = 4 << 20
)

// Specs are the devices of the spec directories, by qualified name.
type Specs struct {
	devices map[string][]int // vendor/class=name -> GPU minors of its nodes
}

// spec is what a CDI spec says that gpusnap reads. That is its kind, its
// devices' names, and the device nodes each device, and every device of the spec,
// adds to a container (CDI's containerEdits.deviceNodes).
type spec struct {
	Kind    string `json:"kind"`
	Devices []struct {
		Name           string `json:"name"`
		ContainerEdits edits  `json:"containerEdits"`
	} `json:"devices"`
	ContainerEdits edits `json:"containerEdits"`
}

type edits struct {
	DeviceNodes []struct {
		Path     string `json:"path"`
		HostPath string `json:"hostPath"`
		Type     string `json:"type"`
		Major    int64  `json:"major"`
		Minor    int64  `json:"minor"`
	} `json:"deviceNodes"`
}

// gpus are the GPU minors the device nodes name, by the one device
// classifier. It takes the host path where the spec gives one, and the
// number where it gives a character device's.
func (e edits) gpus() []int {
	var out []int
	for _, n := range e.DeviceNodes {
		path := cmp.Or(n.HostPath, n.Path)
		kind := snapshot.FileKind{Device: true, Char: n.Type == "c" || n.Type == "u", Major: uint32(n.Major), Minor: uint32(n.Minor)}
		known := kind.Char && n.Major > 0 && n.Minor >= 0 && n.Major < 1<<12 && n.Minor < 1<<20
		if class, minor := (snapshot.DeviceClasses{}).Classify(path, kind, known); class == snapshot.ClassNVIDIA && minor != nil {
			out = append(out, *minor)
		}
	}
	return out
}

// Read reads the specs of dirs (DefaultSpecDirs when nil). A directory that
// does not exist has none. A spec that cannot be read is named in the error
// and its devices stay unknown, so a name it would have resolved does not.
func Read(dirs []string) (*Specs, error) {
	if dirs == nil {
		dirs = DefaultSpecDirs
	}
	s := &Specs{devices: map[string][]int{}}
	var errs []error
	for _, dir := range dirs {
		errs = append(errs, s.readDir(dir)...)
	}
	return s, errors.Join(errs...)
}

func (s *Specs) readDir(dir string) []error {
	f, err := os.Open(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return []error{fmt.Errorf("CDI spec directory: %w", err)}
	}
	defer f.Close()
	entries, err := f.ReadDir(maxSpecFiles + 1)
	var errs []error
	if err != nil && !errors.Is(err, io.EOF) {
		errs = append(errs, fmt.Errorf("CDI spec directory %s: %w", dir, err))
	}
	if len(entries) > maxSpecFiles {
		errs = append(errs, fmt.Errorf("CDI spec directory %s: more than %d entries, the rest not read", dir, maxSpecFiles))
		entries = entries[:maxSpecFiles]
	}
	for _, e := range entries {
		ext := filepath.Ext(e.Name())
		// A link may point out of the directory. Runtimes read it, but gpusnap does not.
		if (ext != ".json" && ext != ".yaml") || !e.Type().IsRegular() {
			continue
		}
		if err := s.readSpec(filepath.Join(dir, e.Name())); err != nil {
			errs = append(errs, fmt.Errorf("CDI spec: %w", err))
		}
	}
	return errs
}

// readSpec adds a spec's devices. A name already read keeps the GPUs of
// both, every GPU it could be, as a runtime that finds it twice refuses it.
func (s *Specs) readSpec(path string) error {
	data, err := safefile.ReadFile(path, maxSpecSize)
	if err != nil {
		return err
	}
	var sp spec
	if err := yaml.Unmarshal(data, &sp); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if !strings.Contains(sp.Kind, "/") {
		return fmt.Errorf("%s: kind %q is not vendor/class", path, sp.Kind)
	}
	common := sp.ContainerEdits.gpus()
	for _, d := range sp.Devices {
		name := sp.Kind + "=" + d.Name
		gpus := append(append(s.devices[name], common...), d.ContainerEdits.gpus()...)
		slices.Sort(gpus)
		s.devices[name] = slices.Compact(gpus)
	}
	return nil
}

// GPUs are the GPU minors (the N of /dev/nvidiaN) the qualified CDI device
// name gives a container, and whether a spec lists that device. A device
// listed with no GPU node gives none.
func (s *Specs) GPUs(name string) ([]int, bool) {
	if s == nil {
		return nil, false
	}
	gpus, ok := s.devices[strings.TrimSpace(name)]
	return gpus, ok
}

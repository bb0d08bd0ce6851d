package snapshot

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// GPUSet names GPUs the way a scheduler hands them out, by minor number (N of
// /dev/nvidiaN, the index Slurm's gres.conf File=/dev/nvidia[0-7] and its
// SLURM_JOB_GPUS give) or by UUID (GPU-..., MIG-...). It is the allocation
// model of every scheduler gpusnap serves, where a tenant is given a set of
// GPUs.
type GPUSet struct {
	Minors []int    `json:"minors,omitempty"`
	UUIDs  []string `json:"uuids,omitempty"`
	// Accel names other vendors' accelerators by one of their IDs
	// (Accelerator.IDs), amd:0, a PCI slot or a card node's name.
	Accel []string `json:"accel,omitempty"`
}

// Limits of a GPU list. A minor of 255 or above is not a GPU (nvidiactl is
// 195:255), and no host has more GPUs than a list may name.
const (
	maxGPUMinor    = 254
	maxGPUListItem = 1024
	maxUUIDLen     = 96
)

// ParseGPUList reads a GPU list as Slurm and CUDA write one ("0,1", "0-3",
// "GPU-8f2c...,MIG-1a2b...", or a mix), and other vendors' accelerators by
// their IDs ("amd:0-1", "0000:03:00.0", "card1"). An empty list is an empty
// set (a job given no GPU). Duplicates are dropped, and the set comes back
// sorted.
func ParseGPUList(list string) (GPUSet, error) {
	var s GPUSet
	list = strings.TrimSpace(list)
	if list == "" {
		return s, nil
	}
	items := strings.Split(list, ",")
	if len(items) > maxGPUListItem {
		return s, fmt.Errorf("GPU list: more than %d entries", maxGPUListItem)
	}
	for _, item := range items {
		item = strings.TrimSpace(item)
		switch {
		case accelItem(item):
			ids, err := accelIDs(item)
			if err != nil {
				return s, err
			}
			s.Accel = append(s.Accel, ids...)
		case strings.HasPrefix(item, "GPU-") || strings.HasPrefix(item, "MIG-"):
			if len(item) > maxUUIDLen || !validUUID(item) {
				return s, fmt.Errorf("GPU list: %q is not a GPU UUID", item)
			}
			s.UUIDs = append(s.UUIDs, item)
		default:
			lo, hi, err := minorRange(item)
			if err != nil {
				return s, err
			}
			for n := lo; n <= hi; n++ {
				s.Minors = append(s.Minors, n)
			}
		}
	}
	slices.Sort(s.Minors)
	s.Minors = slices.Compact(s.Minors)
	slices.Sort(s.UUIDs)
	s.UUIDs = slices.Compact(s.UUIDs)
	slices.Sort(s.Accel)
	s.Accel = slices.Compact(s.Accel)
	return s, nil
}

// minorRange reads "3" or "0-3".
func minorRange(item string) (lo, hi int, err error) {
	a, b, isRange := strings.Cut(item, "-")
	if lo, err = minor(a); err != nil {
		return 0, 0, fmt.Errorf("GPU list: %q is not a GPU number, range (0-3) or UUID (GPU-...)", item)
	}
	hi = lo
	if isRange {
		if hi, err = minor(b); err != nil || hi < lo {
			return 0, 0, fmt.Errorf("GPU list: %q is not a GPU number, range (0-3) or UUID (GPU-...)", item)
		}
	}
	return lo, hi, nil
}

func minor(s string) (int, error) {
	// Base 10 takes digits alone, with no sign, prefix or underscore.
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || len(s) > 3 {
		return 0, fmt.Errorf("not a number")
	}
	if n > maxGPUMinor {
		return 0, fmt.Errorf("not a GPU minor number")
	}
	return int(n), nil
}

// validUUID accepts what NVML prints in a UUID, that is letters, digits,
// '-' and, in MIG UUIDs of old drivers, '/'.
func validUUID(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-' || c == '/') {
			return false
		}
	}
	return true
}

// String writes the set as a list ParseGPUList reads back, as "0,1,GPU-...".
func (s GPUSet) String() string {
	parts := make([]string, 0, len(s.Minors)+len(s.UUIDs)+len(s.Accel))
	for _, n := range s.Minors {
		parts = append(parts, strconv.Itoa(n))
	}
	parts = append(parts, s.UUIDs...)
	parts = append(parts, s.Accel...)
	return strings.Join(parts, ",")
}

// AllocationEnv are the variables a Slurm prolog (or a job's launcher) is
// given that name the job's GPUs, NVIDIA's then AMD's then Intel's. Of
// each vendor's the first set is trusted (envVendors). SLURM_JOB_GPUS is
// Slurm's own, and CUDA_VISIBLE_DEVICES holds the same numbers in a prolog.
var AllocationEnv = []string{"SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ZE_AFFINITY_MASK"}

// envVendors are AllocationEnv's groups, one a vendor, in its order. Their
// indexes name NVIDIA's minors, AMD's amd:N and Intel's intel:N.
var envVendors = []struct {
	vendor string // "" for NVIDIA's, whose list ParseGPUList reads
	names  []string
}{
	{"", []string{"SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES"}},
	{"amd", []string{"ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"}},
	{"intel", []string{"ZE_AFFINITY_MASK"}},
}

// AllocationFromEnv finds the GPUs a scheduler gave a job in its
// environment, each vendor's from its first variable set, and names the
// variables read. In a Slurm prolog (SLURM_JOB_ID set) without any the job
// was given no GPU, so every GPU it uses is outside its allocation.
// Elsewhere, without them, there is no allocation (nil).
func AllocationFromEnv(getenv func(string) string) (set *GPUSet, source string, err error) {
	var sources []string
	for _, g := range envVendors {
		for _, name := range g.names {
			v := getenv(name)
			if v == "" {
				continue
			}
			s, err := vendorList(g.vendor, v)
			if err != nil {
				return nil, name, fmt.Errorf("%s: %w", name, err)
			}
			if set == nil {
				set = &GPUSet{}
			}
			set.Minors = append(set.Minors, s.Minors...)
			set.UUIDs = append(set.UUIDs, s.UUIDs...)
			set.Accel = append(set.Accel, s.Accel...)
			sources = append(sources, name)
			break
		}
	}
	if set != nil {
		return set, strings.Join(sources, ", "), nil
	}
	if getenv("SLURM_JOB_ID") != "" {
		return &GPUSet{}, "SLURM_JOB_ID without SLURM_JOB_GPUS", nil
	}
	return nil, "", nil
}

// vendorList reads one vendor's variable. NVIDIA's is read as ParseGPUList
// does, another's indexes ("0,2", or Level Zero's "0.1", tile 1 of device
// 0) as VENDOR:N, and an AMD UUID (GPU-...) as amd:GPU-....
func vendorList(vendor, v string) (GPUSet, error) {
	if vendor == "" {
		return ParseGPUList(v)
	}
	items := strings.Split(v, ",")
	for i, item := range items {
		item = strings.TrimSpace(item)
		if dev, _, tile := strings.Cut(item, "."); tile && vendor == "intel" {
			item = dev
		}
		items[i] = vendor + ":" + item
	}
	return ParseGPUList(strings.Join(items, ","))
}

// Select keeps, of gpus, those the set names by minor number, by UUID or by
// one of their MIG devices' UUIDs, and gives the test of a process on them.
// A process is on them if NVML lists it on a GPU kept, or it holds or maps a
// /dev/nvidiaN the set names (directly, or through a UUID NVML linked to
// minor N).
func (s GPUSet) Select(gpus []GPUUse) (kept []GPUUse, uses func(*Process) bool) {
	minors := map[int]bool{}
	for _, n := range s.Minors {
		minors[n] = true
	}
	listed := map[int]bool{}
	for _, gu := range gpus {
		if !s.names(gu) {
			continue
		}
		kept = append(kept, gu)
		if gu.MinorNumber != nil {
			minors[*gu.MinorNumber] = true
		}
		for _, u := range gu.Processes {
			listed[u.PID] = true
		}
	}
	return kept, func(p *Process) bool {
		return listed[p.PID] || slices.ContainsFunc(GPUMinors(p), func(n int) bool { return minors[n] })
	}
}

// names reports whether the set names gu.
func (s GPUSet) names(gu GPUUse) bool {
	if gu.MinorNumber != nil && slices.Contains(s.Minors, *gu.MinorNumber) || slices.Contains(s.UUIDs, gu.UUID) {
		return true
	}
	return slices.ContainsFunc(gu.MIG, func(m MIGUse) bool { return m.UUID != "" && slices.Contains(s.UUIDs, m.UUID) })
}

package accel

import (
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/gpusnap/gpusnap/snapshot"
)

// amd is AMD. amdgpu's fdinfo names device memory "vram", and its sysfs
// device has mem_info_vram_total and _used in bytes. ROCm compute goes
// through /dev/kfd, which fdinfo does not count. KFD's tree (class/kfd/kfd)
// has its node's number, each GPU's id and PCI location, and each process's
// memory per GPU.
var amd = vendor{
	name:         "amd",
	pciID:        "0x1002",
	drivers:      []string{"amdgpu"},
	deviceRegion: func(r string) bool { return r == "vram" },
	memory:       amdMemory,
}

func amdMemory(s *sysfs, dev string) (total, used *uint64, err error) {
	t, err := s.readUint(dev + "/mem_info_vram_total")
	if err != nil {
		return nil, nil, err
	}
	u, err := s.readUint(dev + "/mem_info_vram_used")
	if err != nil {
		return nil, nil, err
	}
	return &t, &u, nil
}

const kfdDir = "class/kfd/kfd"

// readKFD reads KFD's tree into a, with /dev/kfd's number, each GPU's id
// joined to its device by PCI slot, and the processes KFD serves. A host
// without KFD has no tree, and nothing is said.
func readKFD(s *sysfs, a *snapshot.Accelerators) {
	devText, err := s.readText(kfdDir + "/dev")
	if err != nil {
		if !notExist(err) {
			a.Errors = append(a.Errors, "kfd: "+err.Error())
		}
		return
	}
	if err := a.KFDNode.UnmarshalText([]byte(devText)); err != nil {
		a.Errors = append(a.Errors, "kfd: dev: "+err.Error())
	}
	nodes, err := s.list(kfdDir + "/topology/nodes")
	if err != nil {
		a.Errors = append(a.Errors, "kfd: topology: "+err.Error())
	}
	for _, n := range nodes {
		dir := kfdDir + "/topology/nodes/" + n
		id, err := s.readUint(dir + "/gpu_id")
		if err != nil {
			a.Errors = append(a.Errors, "kfd: topology node "+n+": "+err.Error())
			continue
		}
		if id == 0 {
			continue // a CPU node
		}
		props, err := s.readText(dir + "/properties")
		if err != nil {
			a.Errors = append(a.Errors, "kfd: topology node "+n+": "+err.Error())
			continue
		}
		slot := kfdPCISlot(props)
		for i := range a.Devices {
			if d := &a.Devices[i]; d.PCISlot == slot && slot != "" {
				d.KFDGPUID = uint32(id)
				d.PerProcess = append(d.PerProcess, "kfd")
			}
		}
	}
	readKFDProcesses(s, a)
}

// kfdPCISlot is the PCI slot of a KFD topology node's properties, from its
// "domain" and "location_id" ((bus << 8) | (device << 3) | function).
func kfdPCISlot(props string) string {
	var domain, loc uint64
	var haveLoc bool
	for line := range strings.SplitSeq(props, "\n") {
		key, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(val), 10, 64)
		if err != nil {
			continue
		}
		switch key {
		case "domain":
			domain = n
		case "location_id":
			loc, haveLoc = n, true
		}
	}
	if !haveLoc || loc == 0 {
		return ""
	}
	return fmt.Sprintf("%04x:%02x:%02x.%x", domain, loc>>8, (loc>>3)&0x1f, loc&7)
}

// readKFDProcesses reads proc/PID/vram_GPUID of each process KFD serves.
func readKFDProcesses(s *sysfs, a *snapshot.Accelerators) {
	pids, err := s.list(kfdDir + "/proc")
	if err != nil {
		if !notExist(err) {
			a.Errors = append(a.Errors, "kfd: proc: "+err.Error())
		}
		return
	}
	for _, name := range pids {
		pid, err := strconv.Atoi(name)
		if err != nil || pid <= 0 {
			continue
		}
		p := snapshot.KFDProcess{PID: pid}
		files, err := s.list(kfdDir + "/proc/" + name)
		if err != nil {
			a.Errors = append(a.Errors, "kfd: proc "+name+": "+err.Error())
		}
		for _, f := range files {
			id, ok := strings.CutPrefix(f, "vram_")
			gpu, perr := strconv.ParseUint(id, 10, 32)
			if !ok || perr != nil {
				continue
			}
			n, err := s.readUint(path.Join(kfdDir, "proc", name, f))
			if err != nil {
				a.Errors = append(a.Errors, "kfd: proc "+name+": "+err.Error())
				continue
			}
			p.VRAM = append(p.VRAM, snapshot.KFDMemory{GPUID: uint32(gpu), Bytes: n})
		}
		a.KFDProcesses = append(a.KFDProcesses, p)
	}
}

package capture

import (
	"strconv"

	"github.com/gpusnap/gpusnap/capture/accel"
	"github.com/gpusnap/gpusnap/capture/procfs"
	"github.com/gpusnap/gpusnap/snapshot"
)

// sysRoot is the sys root a capture reads accelerators from, the one given,
// else /sys on this host's procfs. Another proc root's host has another
// /sys, so there "" reads none.
func sysRoot(given, procRoot string) string {
	if given == "" && isProcfs(procRoot) {
		return "/sys"
	}
	return given
}

// readAccelerators records the accelerators under the sys root in s, and
// each process's DRM clients from the fdinfo of its accelerator holders.
func (cfg *scanConfig) readAccelerators(r *procfs.Reader, s *snapshot.Snapshot, root string) error {
	if root == "" {
		return nil
	}
	a, err := accel.Read(root)
	if err != nil || a == nil {
		return err
	}
	s.Accelerators = a
	var buf []byte
	for i := range s.Processes {
		buf = cfg.drmClients(r, &s.Processes[i], a.KFDNode, buf)
	}
	return nil
}

// drmClients reads the fdinfo of each accelerator node p holds, for its
// access mode and its DRM client, one per client id however many fds share
// it.
func (cfg *scanConfig) drmClients(r *procfs.Reader, p *snapshot.Process, kfd snapshot.DeviceNumber, buf []byte) []byte {
	byID := map[string]int{} // driver, device and client id -> index in p.DRMClients
	for i := range p.Holders {
		h := &p.Holders[i]
		kind := snapshot.AccelNodeKind(h.Target, h.DeviceNumber, kfd)
		if kind == "" || h.RingSlot != nil {
			continue
		}
		dir := strconv.Itoa(p.PID)
		if h.TID != 0 {
			dir += "/task/" + strconv.Itoa(h.TID)
		}
		var err error
		buf, err = r.ReadWholeAt(cfg.rootfd, cfg.root, dir+"/fdinfo/"+strconv.Itoa(h.FD), buf)
		if err == nil {
			h.Flags, h.Access, err = procfs.ParseFdinfoFlags(buf)
		}
		if err != nil {
			p.Errors = append(p.Errors, threadError(h.TID, "fdinfo "+strconv.Itoa(h.FD)+": "+errText(err)))
			continue
		}
		c, ok := accel.ParseFdinfo(buf)
		if !ok {
			continue // kfd, or a driver that keeps no stats
		}
		key := c.Driver + " " + c.PCISlot + " " + strconv.FormatUint(c.ClientID, 10)
		if j, seen := byID[key]; seen {
			p.DRMClients[j].FDs = append(p.DRMClients[j].FDs, h.FD)
			continue
		}
		c.Node, c.FDs, c.TID = h.Target, []int{h.FD}, h.TID
		byID[key] = len(p.DRMClients)
		p.DRMClients = append(p.DRMClients, c)
	}
	return buf
}

package capture

import (
	"context"

	"github.com/gpusnap/gpusnap/snapshot"
)

// glance reads the process open as w.dirfd as the gate needs one that uses
// no GPU, its stat, maps and fds (Options.GPUIdentityOnly). It reports
// whether that is all there is to read, where the process is gone, is a
// kernel thread, or was read without a fault and holds and maps no device
// but plain ones. Anything else is read again whole by the caller.
func (w *worker) glance(res *result) bool {
	id, done := w.statIdentity(res)
	if done {
		return true
	}
	p := &res.p
	if p.State == "Z" && p.Threads > 1 {
		return false // its fds and maps are a live thread's, which identity finds
	}
	if _, _, _, gone := w.readDevices(res, &id); gone {
		return true
	}
	if res.refused || res.exiting || len(p.Errors) > 0 || len(p.Unreadable) > 0 {
		return false
	}
	for _, m := range p.Mappings {
		if !plainDevice(m.DeviceNumber) {
			return false
		}
	}
	for _, h := range p.Holders {
		if !plainDevice(h.DeviceNumber) {
			return false
		}
	}
	res.glanced = true
	return true
}

// plainDevice reports whether a device is one every process may hold and
// none computes on, a memory device (null, zero, random) or a terminal.
// A device whose number is not known is not.
func plainDevice(n snapshot.DeviceNumber) bool {
	switch {
	case n.IsZero():
		return false
	case n.Major == 1, n.Major == 4, n.Major == 5: // mem, tty, console and ptmx
		return true
	}
	return n.Major >= 136 && n.Major <= 143 // pts
}

// fillIdentity reads whole, once NVML and the accelerators are read, the
// glanced processes that a check names, the GPU users NVML lists and their
// ancestors, whose exe their ancestry records. A process that is no longer
// the one glanced keeps what was read and says why the rest is not there.
func (cfg *scanConfig) fillIdentity(ctx context.Context, results []result, s *snapshot.Snapshot) {
	glanced := map[int]bool{}
	for i := range results {
		if results[i].glanced {
			glanced[results[i].p.PID] = true
		}
	}
	if len(glanced) == 0 {
		return
	}
	byPID := make(map[int]int, len(s.Processes))
	for i := range s.Processes {
		byPID[s.Processes[i].PID] = i
	}
	var want []int
	for _, u := range gpuUsers(s) {
		for pid, n := u.PID, 0; pid > 0 && n <= snapshot.MaxAncestry; n++ {
			i, ok := byPID[pid]
			if !ok {
				break
			}
			if glanced[pid] {
				want = append(want, i)
				delete(glanced, pid)
			}
			pid = s.Processes[i].PPID
		}
	}
	w := newWorker(cfg)
	for _, i := range want {
		if ctx.Err() != nil {
			return
		}
		old := &s.Processes[i]
		res := w.process(old.PID)
		if res.vanished || res.p.StartTime != old.StartTime {
			old.Errors = append(old.Errors, "identity: the process exited before who it is was read")
			continue
		}
		if len(res.p.Unreadable) > 0 {
			s.Scan.Unreadable++
		}
		makeValidUTF8(&res.p)
		s.Processes[i] = res.p
	}
}

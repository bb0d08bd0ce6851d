package diff

import (
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/gpusnap/gpusnap/snapshot"
)

// source is one thing that starts a process again, with the evidence line
// and how to stop it.
type source struct {
	why, stop string
	unit      string // the unit that restarts it, or a timer's, and "" for cron or atd
}

// persistenceSources are what the snapshot says restarts p, its unit's
// Restart=, its timer, a scheduler among its ancestors (nearest first).
func persistenceSources(p *snapshot.Process) []source {
	var out []source
	restarts := p.UnitRestart != "" && p.UnitRestart != "no"
	switch {
	case restarts && p.UnitTimer != "":
		out = append(out, source{fmt.Sprintf("its unit %s has Restart=%s, and timer %s starts it", p.SystemdUnit, p.UnitRestart, p.UnitTimer),
			fmt.Sprintf("systemctl disable --now %s %s", p.UnitTimer, p.SystemdUnit), p.SystemdUnit})
	case restarts:
		out = append(out, source{fmt.Sprintf("its unit %s has Restart=%s", p.SystemdUnit, p.UnitRestart),
			"systemctl disable --now " + p.SystemdUnit, p.SystemdUnit})
	case p.UnitTimer != "":
		out = append(out, source{fmt.Sprintf("timer %s starts its unit %s", p.UnitTimer, p.SystemdUnit),
			"systemctl disable --now " + p.UnitTimer, p.UnitTimer})
	}
	for _, a := range p.Ancestry {
		if schedulers[a.Comm] || (a.Exe != "" && schedulers[path.Base(a.Exe)]) {
			user := snapshot.UserText(p.User, p.UID)
			out = append(out, source{fmt.Sprintf("descends from %s (pid %d): a crontab or at job started it", a.Comm, a.PID),
				fmt.Sprintf("remove the crontab line or at job that starts it: crontab -l -u %s, atq", strings.TrimPrefix(user, "uid ")), ""})
			break
		}
	}
	return out
}

// restarter is a live ancestor that restarts a GPU-using child. why says
// what it started before, and stop how to end it.
type restarter struct {
	why, stop string
}

// stepDaemons are the comms of the daemons that start a job's processes,
// which start many by design.
var stepDaemons = map[string]bool{"slurmstepd": true, "systemd": true, "init": true, "containerd-shim": true, "conmon": true}

// restarter finds a live ancestor of p, of p's uid, that is not a session
// leader, a login shell or a job's step daemon, and that started a GPU-using
// process with p's exe or command line before (in FROM or the history), gone
// at TO. Such a loop brings p back after a kill.
func (c *comparison) restarter(p *snapshot.Process) *restarter {
	for _, a := range p.Ancestry {
		anc := c.toByKey[idOf(a.PID, a.StartTime)]
		if anc == nil || anc.PID == 1 || anc.UID != p.UID || stepDaemons[anc.Comm] || anc.Session == anc.PID || loginShell(anc) {
			continue
		}
		if earlier := c.earlierChild(anc, p); earlier != "" {
			stop := fmt.Sprintf("kill %d (%s)", anc.PID, anc.Comm)
			if anc.PGID > 1 && anc.PGID != anc.Session {
				stop = fmt.Sprintf("kill -9 -- -%d, its process group, or kill %d (%s)", anc.PGID, anc.PID, anc.Comm)
			}
			return &restarter{fmt.Sprintf("its ancestor %s (%s, %s) restarts it: it started %s before", anc.Key(), anc.Comm, snapshot.UserText(anc.User, anc.UID), earlier), stop}
		}
	}
	return nil
}

// loginShell reports whether p is a login shell, whose argv[0] begins with "-".
func loginShell(p *snapshot.Process) bool {
	return len(p.Cmdline) > 0 && strings.HasPrefix(p.Cmdline[0], "-")
}

// earlierChild names a child of anc, in FROM or the history, that used a
// GPU with p's exe or command line and is gone at TO, or "".
func (c *comparison) earlierChild(anc, p *snapshot.Process) string {
	for _, s := range append([]*snapshot.Snapshot{c.from}, c.opts.History...) {
		for i := range s.Processes {
			q := &s.Processes[i]
			if q.PPID != anc.PID || q.StartTime < anc.StartTime || q.Key() == p.Key() || c.toByKey[idOf(q.PID, q.StartTime)] != nil {
				continue
			}
			sameExe := q.Exe != "" && q.Exe == p.Exe
			if !(q.UsesNVIDIA() || q.ExeSHA256 != "") || !(sameExe || (len(q.Cmdline) > 0 && slices.Equal(q.Cmdline, p.Cmdline))) {
				continue
			}
			return fmt.Sprintf("pid %d (%s), which used a GPU in snapshot %s and has exited", q.PID, q.Comm, s.ID)
		}
	}
	return ""
}

// reparentedWhy says how p lost the parent that started it and since when,
// or "". A system service lost none, as systemd started it.
func (c *comparison) reparentedWhy(p, before *snapshot.Process) string {
	if systemService(p) {
		return ""
	}
	now := "init (pid 1)"
	if p.PPID != 1 {
		now = "subreaper pid " + strconv.Itoa(p.PPID)
		if len(p.Ancestry) > 0 {
			now += " (" + p.Ancestry[0].Comm + ")"
		}
	}
	if s, q := c.lastWithOtherParent(p); q != nil {
		return fmt.Sprintf("reparented: its parent was %d in snapshot %s (%s); since then %s adopted it", q.PPID, s.ID, s.Host.CaptureStart.UTC().Format("2006-01-02 15:04:05 UTC"), now)
	}
	if p.Reparented {
		started := "it started"
		if !p.Started.IsZero() {
			started += " at " + p.Started.UTC().Format("2006-01-02 15:04:05 UTC")
		}
		return fmt.Sprintf("reparented: it left the session its job started it in, and %s adopted it after its parent exited, at a time no snapshot recorded (%s)", now, started)
	}
	return ""
}

// lastWithOtherParent finds the latest snapshot (FROM or the history) in
// which p had another parent than at TO, and p's record there.
func (c *comparison) lastWithOtherParent(p *snapshot.Process) (*snapshot.Snapshot, *snapshot.Process) {
	var best *snapshot.Snapshot
	var rec *snapshot.Process
	for _, s := range append([]*snapshot.Snapshot{c.from}, c.opts.History...) {
		for i := range s.Processes {
			q := &s.Processes[i]
			if q.Key() == p.Key() && q.PPID != p.PPID && (best == nil || s.Host.CaptureStart.After(best.Host.CaptureStart)) {
				best, rec = s, q
			}
		}
	}
	return best, rec
}

// nodeHolder is a live process that holds or maps a GPU's node.
type nodeHolder struct {
	proc    *snapshot.Process
	device  string
	gpu     string // the GPU's index (its minor), for nvidia-smi -i and check --gpus
	allowed bool
}

// nodeHolders are the live processes at TO that hold or map the node of
// the GPU (or MIG instance's GPU) whose UUID is uuid.
func (c *comparison) nodeHolders(uuid string) []nodeHolder {
	var minor *int
	for _, pl := range c.toNVML.pools {
		if pl.uuid == uuid && pl.minor != nil {
			minor = pl.minor
		}
	}
	if minor == nil {
		return nil
	}
	var out []nodeHolder
	for _, ch := range c.deviceUsers {
		if ch.proc.Defunct() {
			continue
		}
		for _, u := range ch.uses {
			if !u.nvidia() || u.gpuMinor == nil || *u.gpuMinor != *minor {
				continue
			}
			kind := KindLeftoverDeviceHolder
			if c.check {
				kind = KindGPUInUse
			}
			allowed := c.opts.Allow != nil && c.opts.Allow.match(&Finding{Kind: kind, Process: processRef(ch.proc), Device: u.device}, ch.proc) != nil
			out = append(out, nodeHolder{ch.proc, u.device, strconv.Itoa(*minor), allowed})
			break
		}
	}
	return out
}

// holderLines are the evidence lines naming each holder of a GPU's node.
func holderLines(hs []nodeHolder) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		allowed := "the allow list does not name it"
		if h.allowed {
			allowed = "allowed"
		}
		out[i] = fmt.Sprintf("%s (%s, exe %s) holds or maps %s: it may keep the context alive; %s",
			h.proc.Key(), h.proc.Comm, snapshot.ExeText(h.proc.Exe, h.proc.ExeDeleted), h.device, allowed)
	}
	return out
}

// signContext says whether a job vouches for p and whether p runs as that
// job's user (compromiseRules read it).
func (c *comparison) signContext(p *snapshot.Process, tenant string) signContext {
	if ownerText(p) == "" {
		return signContext{}
	}
	ctx := signContext{inJob: tenant == "" || ownTenancy(p, tenant) != "", jobUIDs: map[int]bool{}}
	ctx.otherJob = !ctx.inJob
	for _, s := range c.snapshots() {
		for i := range s.Processes {
			q := &s.Processes[i]
			if q.Key() != p.Key() && !q.KernelThread && q.SlurmJobID == p.SlurmJobID && q.PodUID == p.PodUID && q.ContainerID == p.ContainerID && len(q.OwnerDoubts()) == 0 {
				ctx.jobUIDs[q.UID] = true
			}
		}
	}
	return ctx
}

package watch

import (
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpusnap/gpusnap/capture"
	"github.com/gpusnap/gpusnap/eventlog"
)

// cgroupPaths names cgroup v2 ids. The id the kernel reports is the inode
// number of the cgroup's directory. A cgroup made after the last walk is
// found by walking again, at most every walkEvery.
type cgroupPaths struct {
	root     string
	byID     map[uint64]string
	lastWalk time.Time
}

const (
	walkEvery  = 200 * time.Millisecond
	maxCgroups = 1 << 17 // bounds the walk, since a tenant can make cgroups of its own
)

func newCgroupPaths() *cgroupPaths {
	return &cgroupPaths{root: capture.CgroupV2Root(), byID: map[uint64]string{}}
}

// path returns the cgroup's path below the hierarchy's root, or "".
func (c *cgroupPaths) path(id uint64) string {
	if p, ok := c.byID[id]; ok || c.root == "" {
		return p
	}
	if time.Since(c.lastWalk) < walkEvery {
		return ""
	}
	c.walk()
	return c.byID[id]
}

func (c *cgroupPaths) walk() {
	c.lastWalk = time.Now()
	byID := make(map[uint64]string, len(c.byID))
	_ = filepath.WalkDir(c.root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if len(byID) >= maxCgroups {
			return filepath.SkipAll
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			rel := strings.TrimPrefix(path, c.root)
			if rel == "" {
				rel = "/"
			}
			byID[st.Ino] = rel
		}
		return nil
	})
	c.byID = byID
}

// identities names the processes events come from. A process that used a
// device is kept (by PID@START) until its exit, so its fork and exit carry
// the same identity.
type identities struct {
	proc    *capture.ProcRoot
	cgroups *cgroupPaths
	known   map[string]*eventlog.Process
	// uses are the devices each kept process opened or mapped (or
	// inherited), as its children inherit them at a fork.
	uses map[string][]deviceUse
	// lineage names, for each kept descendant of a device user, the device
	// user it descends from (eventlog.Event.Lineage).
	lineage map[string]string
}

// deviceUse is a device a process used, and how.
type deviceUse struct {
	dev           *eventlog.Device
	access, perms string
}

// maxKnown bounds what identities keeps, since a tenant can fork at will.
// maxUses bounds the uses kept per process. Past it, further devices or
// modes of it are in the log, not passed on to its children's records.
const (
	maxKnown = 1 << 16
	maxUses  = 8
)

func newIdentities(proc *capture.ProcRoot) *identities {
	return &identities{proc: proc, cgroups: newCgroupPaths(), known: map[string]*eventlog.Process{}, uses: map[string][]deviceUse{},
		lineage: map[string]string{}}
}

// used records that the process of key used a device as ev says.
func (ids *identities) used(key string, ev *eventlog.Event) {
	us := ids.uses[key]
	for _, u := range us {
		if u.dev.Path == ev.Device.Path && u.dev.Number == ev.Device.Number && u.access == ev.Access && u.perms == ev.Perms {
			return
		}
	}
	u := deviceUse{dev: ev.Device, access: ev.Access, perms: ev.Perms}
	if len(us) < maxUses {
		ids.uses[key] = append(us, u)
		return
	}
	// Past the bound a writable mapping still displaces a use that is not
	// one. It is what makes a lineage's finding high, and a tenant could
	// otherwise push it out with eight read-only opens.
	if writableMapping(u.perms) {
		for i := range us {
			if !writableMapping(us[i].perms) {
				us[i] = u
				return
			}
		}
	}
}

// writableMapping reports whether perms (a mapping's, as maps prints them)
// allow writing.
func writableMapping(perms string) bool { return len(perms) > 1 && perms[1] == 'w' }

// inherit passes the parent's uses and lineage on to its child, and returns
// the child's inherit records. There is one per use, or one naming no device
// where the parent's uses are not known (made before watch kept it). root is
// the lineage both belong to.
func (ids *identities) inherit(parent, child *eventlog.Process, at time.Time, source string) (root string, out []eventlog.Event) {
	root = ids.lineageOf(parent.Key())
	us := ids.uses[parent.Key()]
	ids.uses[child.Key()] = slices.Clone(us)
	ids.lineage[child.Key()] = root
	note := "inherited at its fork from " + parent.Key()
	if len(us) == 0 {
		return root, []eventlog.Event{{Time: at, Kind: eventlog.KindInherit, Source: source, Process: clone(child), Lineage: root,
			Note: note + ", a device user whose devices this watch did not see it take"}}
	}
	out = make([]eventlog.Event, 0, len(us))
	for _, u := range us {
		out = append(out, eventlog.Event{Time: at, Kind: eventlog.KindInherit, Source: source, Process: clone(child),
			Device: u.dev, Access: u.access, Perms: u.perms, Note: note, Lineage: root})
	}
	return root, out
}

// lineageOf is the device user a kept process descends from, or its own
// key where it descends from none watch kept.
func (ids *identities) lineageOf(key string) string {
	if root, ok := ids.lineage[key]; ok {
		return root
	}
	return key
}

// lookup returns the kept identity of pid@start, if any.
func (ids *identities) lookup(pid int, start uint64) *eventlog.Process {
	return ids.known[strconv.Itoa(pid)+"@"+strconv.FormatUint(start, 10)]
}

func (ids *identities) keep(p *eventlog.Process) {
	if len(ids.known) >= maxKnown {
		clear(ids.known)
		clear(ids.uses)
		clear(ids.lineage)
	}
	ids.known[p.Key()] = p
}

// forget drops an exited process and returns the lineage it descended in, ""
// for none (a device user that was no one's child watch kept).
func (ids *identities) forget(p *eventlog.Process) string {
	key := p.Key()
	root := ids.lineage[key]
	delete(ids.known, key)
	delete(ids.uses, key)
	delete(ids.lineage, key)
	return root
}

// fill completes what the kernel reported of a process. It adds its exe (the
// kernel's walk of it, or /proc's where that was cut short, which also says
// whether it was deleted), its cgroup's path, the container, pod or Slurm
// job that path names, and what the cgroup filesystem says of who could have
// named it (the owner rule's facts).
func (ids *identities) fill(p *eventlog.Process, kernelExe string) {
	p.Exe = kernelExe
	if exe, deleted, ok := ids.proc.Exe(p.PID, p.StartTime); ok && (deleted || kernelExe == "" || strings.HasPrefix(kernelExe, "...")) {
		p.Exe, p.ExeDeleted = exe, deleted
	}
	if p.Cgroup == "" && p.CgroupID != 0 {
		p.Cgroup = ids.cgroups.path(p.CgroupID)
	}
	if p.Cgroup != "" {
		p.ContainerID, p.PodUID, p.SlurmJobID, p.OwnerCgroups = capture.CgroupOwner(p.Cgroup)
	}
}

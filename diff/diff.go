package diff

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/kmsg"
	"github.com/gpusnap/gpusnap/snapshot"
)

// DefaultZombieThreshold is the default of --zombie-threshold. GPU memory
// growth below it is allocator noise, not a zombie context.
const DefaultZombieThreshold = 64 << 20

// Options tune a diff. The zero value compares with a zero zombie threshold,
// no allow list, no maps diffs and no history.
type Options struct {
	ZombieThreshold uint64 // bytes, set by --zombie-threshold, default 64 MiB
	// JobEnded says the tenant's job has ended, as --job-ended says after a
	// Slurm epilog or a pod's end. What its cgroup still names is a
	// leftover, not the job.
	JobEnded bool
	MapsDiff bool // fill Result.MapsDiffs
	// History holds earlier stored snapshots (of the tenant), to tell which
	// tenant process a surviving mapping was inherited from.
	History []*snapshot.Snapshot
	// Allow lists the expected workloads of --allow FILE. Their findings
	// are downgraded to info, with Finding.Allowed naming the entry.
	Allow *AllowList
	// KernelLog is the kernel log between FROM and TO, as kmsg.ReadWindow
	// read it. The Xids and forged driver records in it are findings, and
	// what of it is missing is a note. Nil means not read, and the result
	// says so.
	KernelLog *kmsg.Window
	// Events is the event log gpusnap watch recorded between FROM and TO,
	// or nil where no watch ever ran. It tells of transient processes and
	// of where a survivor's device came from. The rules walk it several
	// times with eachEvent, so an eventlog.Window holds a small window from
	// its one read and reads a large one from disk at each walk.
	Events eventlog.Source
	// ExpectWatch says a watch is configured to record every window
	// (--expect-watch). A window its log does not cover whole is then a
	// window_not_covered finding even where no watch record precedes FROM.
	ExpectWatch bool
	// LogProblems are what reading the window's event log found beside its
	// records, such as no log, a log that cannot be read, or a flush that
	// never reached TO (eventlog.WaitReached).
	LogProblems []eventlog.Problem
}

// Compare reports what to holds that from did not.
func Compare(from, to *snapshot.Snapshot, opts Options) *Result {
	c := newComparison(from, to, opts, false)
	var findings []Finding
	for _, rule := range registry {
		for _, raise := range rule.compare {
			findings = append(findings, raise(c)...)
		}
	}
	c.attachInheritance(findings)
	// Persistence looks behind the other findings' processes, and is
	// allowed and triaged as they are.
	findings = append(findings, c.persistence(findings)...)
	c.applyAllow(findings)
	c.attachTriage(findings)
	c.attachShapes(findings)
	sortFindings(findings)
	if findings == nil {
		findings = []Finding{}
	}
	r := &Result{
		Utilization: c.utilizationResult(),
		From:        from.ID,
		To:          to.ID,
		FromTime:    from.Host.CaptureStart,
		ToTime:      to.Host.CaptureStart,
		Tenant:      cmp.Or(to.Tenant, from.Tenant),
		Findings:    findings,
		Summary:     summarize(findings),
		Notes:       c.notes,
		Complete:    !c.partial,
	}
	if opts.MapsDiff {
		r.MapsDiffs = c.mapsDiffs(findings)
	}
	return r
}

// comparison indexes the two snapshots by process identity and PID, so every
// rule looks processes up in a map instead of scanning.
type comparison struct {
	from, to *snapshot.Snapshot
	opts     Options

	fromByKey map[procID]*snapshot.Process
	toByKey   map[procID]*snapshot.Process
	fromByPID map[int]*snapshot.Process
	toByPID   map[int]*snapshot.Process
	// toUnread are PIDs alive at TO that refused some reads. They are
	// alive, though maybe known by PID alone.
	toUnread map[int]bool

	fromNVML, toNVML *nvmlIndex
	// fromAccel and toAccel index the accelerators other than NVIDIA's, and
	// are nil where a snapshot read none.
	fromAccel, toAccel *accelIndex

	// deviceUsers lists, for each process at TO with a device mapping or holder,
	// its uses and those it had at FROM (none for a new process).
	deviceUsers []processChange

	notes []string

	// since is where the window of the event log begins, at FROM's capture
	// start or a check's --window before its capture.
	since time.Time

	// check is set by Check, where FROM is a host with nothing allowed, not
	// a capture.
	check bool

	// partial says some part of the host was not compared (see notCompared).
	partial bool

	// toUnaccounted caches unaccountedAtTO.
	toUnaccounted map[string]*uint64

	// mps caches mpsClients, and mpsNoted holds the MPS servers a note has
	// named.
	mps      map[*snapshot.Process][]*snapshot.Process
	mpsNoted map[*snapshot.Process]bool

	// util caches utilization, the shapes of watch's samples in the window.
	util *Utilization
}

// windowEnd is where the window's event and accounting records end, TO's
// capture end. A process that used a GPU and exited while TO was captured is
// in neither snapshot, and only these records know it.
func (c *comparison) windowEnd() time.Time {
	if c.to.Host.CaptureEnd.After(c.to.Host.CaptureStart) {
		return c.to.Host.CaptureEnd
	}
	return c.to.Host.CaptureStart
}

// notCompared notes a part of the host the diff could not compare. The
// result is then not complete, and no findings is not "clean".
func (c *comparison) notCompared(note string) {
	c.notes = append(c.notes, note)
	c.partial = true
}

// procID is a process's identity, its PID and start time, which Key writes
// as PID@START. As a map key it costs no text to build, where a diff of two
// snapshots of 5,000 processes would build 10,000 keys.
type procID struct {
	pid   int
	start uint64
}

func idOf(pid int, start uint64) procID { return procID{pid, start} }

// processChange is one process's device uses at TO beside those at FROM.
type processChange struct {
	proc   *snapshot.Process
	before *snapshot.Process // the same process (PID@START) at FROM, or nil
	uses   []*deviceUse
	prior  map[string]*deviceUse // by device, at FROM
}

func newComparison(from, to *snapshot.Snapshot, opts Options, check bool) *comparison {
	c := &comparison{
		from:      from,
		to:        to,
		opts:      opts,
		check:     check,
		fromByKey: make(map[procID]*snapshot.Process, len(from.Processes)),
		toByKey:   make(map[procID]*snapshot.Process, len(to.Processes)),
		fromByPID: make(map[int]*snapshot.Process, len(from.Processes)),
		toByPID:   make(map[int]*snapshot.Process, len(to.Processes)),
		toUnread:  make(map[int]bool, len(to.Scan.RefusedPIDs)),
		fromNVML:  indexNVML(&from.NVML, from.Processes),
		toNVML:    indexNVML(&to.NVML, to.Processes),
		fromAccel: indexAccel(from.Accelerators),
		toAccel:   indexAccel(to.Accelerators),
		since:     from.Host.CaptureStart,
	}
	for i := range from.Processes {
		p := &from.Processes[i]
		c.fromByKey[idOf(p.PID, p.StartTime)] = p
		c.fromByPID[p.PID] = p
	}
	for i := range to.Processes {
		p := &to.Processes[i]
		c.toByKey[idOf(p.PID, p.StartTime)] = p
		c.toByPID[p.PID] = p
	}
	for _, pid := range to.Scan.RefusedPIDs {
		c.toUnread[pid] = true
	}
	for i := range to.Processes {
		p := &to.Processes[i]
		uses := deviceUses(p, c.toAccel)
		if uses == nil {
			continue
		}
		ch := processChange{proc: p, uses: uses, before: c.fromByKey[idOf(p.PID, p.StartTime)]}
		if ch.before != nil {
			prior := deviceUses(ch.before, c.fromAccel)
			ch.prior = make(map[string]*deviceUse, len(prior))
			for _, u := range prior {
				ch.prior[u.key()] = u
			}
		}
		c.deviceUsers = append(c.deviceUsers, ch)
	}
	c.noteLimits()
	c.noteKernelLog()
	c.noteGPUEvents()
	return c
}

// noteLimits records what makes this comparison weaker than it looks.
func (c *comparison) noteLimits() {
	if c.from.Host.BootID != "" && c.to.Host.BootID != "" && c.from.Host.BootID != c.to.Host.BootID {
		c.notes = append(c.notes, "the snapshots come from different boots (boot ids differ): every process at TO counts as new")
	}
	if c.from.Host.Hostname != "" && c.to.Host.Hostname != "" && c.from.Host.Hostname != c.to.Host.Hostname {
		c.notes = append(c.notes, "the snapshots come from different hosts ("+c.from.Host.Hostname+", "+c.to.Host.Hostname+")")
	}
	if n := c.to.Scan.Unreadable; n > 0 {
		// Counts, not PIDs, since thousands refuse a user other than root.
		c.notCompared(fmt.Sprintf("%d of %d processes at TO could not be read in full (maps or fds; root reads all but non-dumpable ones): what they map or hold was not compared; those new or newly unreadable since FROM are %s findings",
			n, len(c.to.Processes), KindUnreadableProcess))
	}
}

// usedNVIDIA reports whether a process mapped or held an NVIDIA device, or
// was listed by NVML, in its snapshot.
func usedNVIDIA(p *snapshot.Process, nv *nvmlIndex) bool {
	return p != nil && (p.UsesNVIDIA() || len(nv.byPID[p.PID]) > 0)
}

// sortFindings orders findings for people and for byte-stable JSON, by
// severity (highest first), then kind, pid, device, GPU and summary.
func sortFindings(fs []Finding) {
	slices.SortStableFunc(fs, func(a, b Finding) int {
		return cmp.Or(
			cmp.Compare(b.Severity, a.Severity),
			cmp.Compare(a.Kind, b.Kind),
			cmp.Compare(a.pid(), b.pid()),
			cmp.Compare(a.startTime(), b.startTime()),
			cmp.Compare(a.Device, b.Device),
			cmp.Compare(a.GPUUUID, b.GPUUUID),
			cmp.Compare(a.Summary, b.Summary),
		)
	})
}

func (f *Finding) pid() int {
	if f.Process == nil {
		return 0
	}
	return f.Process.PID
}

func (f *Finding) startTime() uint64 {
	if f.Process == nil {
		return 0
	}
	return f.Process.StartTime
}

// summarize counts findings by severity. Every severity has a count, zero
// included, so scripts can read any of them without a default.
func summarize(fs []Finding) Summary {
	s := Summary{Total: len(fs), BySeverity: make(map[string]int, len(severityNames))}
	for _, n := range severityNames {
		s.BySeverity[n] = 0
	}
	worst := Severity(-1)
	for _, f := range fs {
		s.BySeverity[f.Severity.String()]++
		if f.Allowed != "" {
			s.Allowed++
		}
		worst = max(worst, f.Severity)
	}
	if worst >= Info {
		s.Worst = worst.String()
	}
	return s
}

// Failed reports whether the result holds a finding at or above threshold.
func (r *Result) Failed(threshold Severity) bool { return r.FailedOn(AtLeast(threshold)) }

// FailedOn reports whether the result holds a finding that fails f, which
// --fail-on turns into exit status 1.
func (r *Result) FailedOn(f FailOn) bool {
	for i := range r.Findings {
		if f.fails(&r.Findings[i]) {
			return true
		}
	}
	return false
}

// live reports whether a PID has a process at TO that is not defunct, read
// or refused.
func (c *comparison) live(pid int) bool {
	if p := c.toByPID[pid]; p != nil {
		return !p.Defunct()
	}
	return c.toUnread[pid]
}

// at names the capture judged in a line of text, "at TO" in a diff and "now"
// in a check, which judges the host as it is and has no FROM to speak of.
func (c *comparison) at() string {
	if c.check {
		return "now"
	}
	return "at TO"
}

package render

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/internal/safetext"
	"github.com/gpusnap/gpusnap/snapshot"
)

// report is what report.md and report.html show. Every string in it that a
// process, a tenant or a host could choose has already been through
// safetext.Escape, so no newline, escape sequence or invalid UTF-8 reaches
// either renderer, which then quote it for their own syntax.
type report struct {
	Title     string
	Tenant    string
	Version   string
	UID       int
	Host      []field
	Before    snapRow
	After     snapRow
	Verdict   string
	Lead      string   // what to act on first (diff.LeadOf), escaped, or "" with nothing to act on
	Notes     []string // what the diff could not check
	Summary   diff.Summary
	Groups    []group
	Blocks    []block // what to do, the processBlocks of the findings
	Timeline  []event
	Charts    []chart
	Processes []process
}

type field struct{ Name, Value string }

type snapRow struct{ Role, ID, Label, Time string }

type group struct {
	Severity string
	Findings []finding
}

type finding struct {
	N        int
	Kind     string
	Severity string
	Summary  string
	Fields   []field
	Evidence []string
	process  *diff.ProcessRef // for the charts' marks
}

type event struct {
	At   time.Time
	Time string
	What string
}

type process struct {
	Key      string
	Comm     string
	Fields   []field
	DiffFile string     // maps/KEY.diff, "" when the diff gave none
	Diff     []diffLine // the unified maps diff, line by line
	Raw      *snapshot.Raw
	RawDir   string
}

type diffLine struct{ Class, Text string }

// BundleInput is what the bundle's report pages are rendered from.
type BundleInput struct {
	Before *snapshot.Snapshot // FROM
	After  *snapshot.Snapshot // TO
	Result *diff.Result       // the diff of Before and After
	// Version is the gpusnap writing the pages, and UID the uid it ran as.
	Version string
	UID     int
	// TenantStart and TenantEnd place the tenant's job on the time line.
	// They are zero when not known.
	TenantStart, TenantEnd time.Time
	// Events is what watch recorded between the snapshots, or nil.
	Events eventlog.Source
	// MapsDir and RawDir are where the bundle holds each process's maps
	// diff and kernel text, which the pages name.
	MapsDir, RawDir string
}

// Pages are the bundle's report pages and the processes they show.
type Pages struct {
	Markdown, HTML []byte
	// Processes are the processes involved, in the pages' order.
	Processes []Involved
}

// Involved is a process the pages show, by its PID@START and the kernel
// text its snapshot kept (nil when none), which the bundle stores beside
// the pages.
type Involved struct {
	Key string
	Raw *snapshot.Raw
}

// BundlePages renders report.md and report.html of in.
func BundlePages(in BundleInput) (*Pages, error) {
	r := newReport(in)
	html, err := r.html()
	if err != nil {
		return nil, err
	}
	pages := &Pages{Markdown: r.markdown(), HTML: html}
	for _, p := range r.Processes {
		pages.Processes = append(pages.Processes, Involved{Key: p.Key, Raw: p.Raw})
	}
	return pages, nil
}

func newReport(in BundleInput) *report {
	r := &report{
		Tenant:  safetext.Escape(in.Result.Tenant),
		Version: safetext.Escape(in.Version),
		UID:     in.UID,
		Summary: in.Result.Summary,
		Before:  snapRow{Role: "From", ID: safetext.Escape(in.Before.ID), Label: safetext.Escape(in.Before.Label), Time: formatTime(in.Before.Host.CaptureStart)},
		After:   snapRow{Role: "To", ID: safetext.Escape(in.After.ID), Label: safetext.Escape(in.After.Label), Time: formatTime(in.After.Host.CaptureStart)},
	}
	if r.Tenant == "" {
		r.Tenant = safetext.Escape(in.After.Tenant)
	}
	r.Title = "gpusnap evidence bundle"
	if r.Tenant != "" {
		r.Title += ": tenant " + r.Tenant
	}
	h := in.After.Host
	r.Host = nonEmpty([]field{
		{"hostname", safetext.Escape(h.Hostname)},
		{"kernel", safetext.Escape(h.KernelRelease)},
		{"boot id", safetext.Escape(h.BootID)},
		{"driver", safetext.Escape(in.After.NVML.DriverVersion)},
	})
	r.Verdict = verdict(in.Result)
	r.Lead = safetext.Escape(diff.LeadOf(in.Result.Findings))
	for _, n := range in.Result.Notes {
		r.Notes = append(r.Notes, safetext.Escape(n))
	}
	r.Groups = groups(in.Result.Findings)
	r.Blocks = processBlocks(in.Result.Findings)
	r.Processes = processes(in)
	r.Timeline = timeline(in, r.Processes)
	r.Charts = charts(in.Result.Utilization, r.Groups)
	return r
}

// verdict is the one line a responder reads first.
func verdict(res *diff.Result) string {
	n := len(res.Findings)
	switch {
	case n == 0 && res.Complete:
		return "No findings: nothing was left behind between the two snapshots."
	case n == 0:
		return "No findings in what was compared, but not everything was: the notes say what was not."
	}
	var parts []string
	for s := diff.Critical; s >= diff.Info; s-- {
		if c := countSeverity(res.Findings, s); c > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c, s))
		}
	}
	return fmt.Sprintf("%d finding%s: %s.", n, plural(n), strings.Join(parts, ", "))
}

func countSeverity(fs []diff.Finding, s diff.Severity) int {
	n := 0
	for _, f := range fs {
		if f.Severity == s {
			n++
		}
	}
	return n
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// ordered is the findings in report order, by severity, highest first,
// keeping the diff's order within a severity.
func ordered(fs []diff.Finding) []diff.Finding {
	out := append([]diff.Finding(nil), fs...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Severity > out[j].Severity })
	return out
}

// groups gathers the findings by severity, numbered in report order.
func groups(fs []diff.Finding) []group {
	var out []group
	for i, f := range ordered(fs) {
		if len(out) == 0 || out[len(out)-1].Severity != f.Severity.String() {
			out = append(out, group{Severity: f.Severity.String()})
		}
		g := &out[len(out)-1]
		g.Findings = append(g.Findings, findingView(i+1, f))
	}
	return out
}

func findingView(n int, f diff.Finding) finding {
	v := finding{N: n, Kind: safetext.Escape(f.Kind), Severity: f.Severity.String(), Summary: safetext.Escape(f.Summary), process: f.Process}
	var fields []field
	if p := f.Process; p != nil {
		fields = append(fields,
			field{"process", p.Key()},
			field{"comm", safetext.Escape(p.Comm)},
			field{"exe", exeText(p.Exe, p.ExeDeleted)},
			field{"cmdline", safetext.Join(p.Cmdline)},
			field{"user", userText(p.User, p.UID)},
			field{"container", safetext.Escape(p.ContainerID)},
			field{"pod", safetext.Escape(p.PodUID)},
			field{"slurm job", safetext.Escape(p.SlurmJobID)},
			field{"cgroup", safetext.Escape(p.Cgroup)},
		)
	}
	fields = append(fields,
		field{"device", safetext.Escape(f.Device)},
		field{"gpu", safetext.Escape(f.GPUUUID)},
		field{"inherited from", safetext.Escape(f.InheritedFrom)},
		field{"allowed by", safetext.Escape(f.Allowed)},
	)
	v.Fields = nonEmpty(fields)
	for _, e := range f.Evidence {
		v.Evidence = append(v.Evidence, safetext.Escape(e))
	}
	return v
}

func exeText(exe string, deleted bool) string {
	if exe == "" {
		return ""
	}
	return snapshot.ExeText(safetext.Escape(exe), deleted)
}

func userText(user string, uid int) string {
	if user == "" {
		return snapshot.UserText("", uid)
	}
	return fmt.Sprintf("%s (uid %d)", safetext.Escape(user), uid)
}

func nonEmpty(fs []field) []field {
	out := fs[:0]
	for _, f := range fs {
		if f.Value != "" {
			out = append(out, f)
		}
	}
	return out
}

// processIndex finds a process of either snapshot by PID@START. TO wins, as
// the state the findings are about.
func processIndex(in BundleInput) map[string]*snapshot.Process {
	byKey := map[string]*snapshot.Process{}
	for _, s := range []*snapshot.Snapshot{in.Before, in.After} {
		for i := range s.Processes {
			byKey[s.Processes[i].Key()] = &s.Processes[i]
		}
	}
	return byKey
}

// processes are the processes involved, those the findings name, in report
// order, then those with a maps diff and no finding.
func processes(in BundleInput) []process {
	byKey := processIndex(in)
	var out []process
	seen := map[string]bool{}
	add := func(key string, ref *diff.ProcessRef) {
		if !seen[key] {
			seen[key] = true
			out = append(out, processView(in, key, byKey[key], ref))
		}
	}
	for _, f := range ordered(in.Result.Findings) {
		if f.Process != nil {
			add(f.Process.Key(), f.Process)
		}
	}
	rest := make([]string, 0, len(in.Result.MapsDiffs))
	for key := range in.Result.MapsDiffs {
		rest = append(rest, key)
	}
	sort.Strings(rest)
	for _, key := range rest {
		add(key, nil)
	}
	return out
}

func processView(in BundleInput, key string, p *snapshot.Process, ref *diff.ProcessRef) process {
	v := process{Key: key}
	switch {
	case p != nil:
		v.Comm = safetext.Escape(p.Comm)
		v.Fields = nonEmpty([]field{
			{"exe", exeText(p.Exe, p.ExeDeleted)},
			{"cmdline", safetext.Join(p.Cmdline)},
			{"user", userText(p.User, p.UID)},
			{"started", formatTime(p.Started)},
			{"parent pid", strconv.Itoa(p.PPID)},
			{"container", safetext.Escape(p.ContainerID)},
			{"pod", safetext.Escape(p.PodUID)},
			{"slurm job", safetext.Escape(p.SlurmJobID)},
			{"systemd unit", safetext.Escape(p.SystemdUnit)},
		})
		v.Raw = p.Raw
	case ref != nil:
		v.Comm = safetext.Escape(ref.Comm)
		v.Fields = nonEmpty([]field{
			{"exe", exeText(ref.Exe, ref.ExeDeleted)},
			{"user", userText(ref.User, ref.UID)},
			{"note", "not in either snapshot's process list"},
		})
	}
	if v.Raw != nil {
		v.RawDir = in.RawDir + "/" + key + "/"
	}
	if text, ok := in.Result.MapsDiffs[key]; ok {
		v.DiffFile = in.MapsDir + "/" + key + ".diff"
		v.Diff = diffLines(text)
	}
	return v
}

// diffLines classes each line of a unified diff for display.
func diffLines(text string) []diffLine {
	text = strings.TrimSuffix(text, "\n")
	if text == "" {
		return nil
	}
	var out []diffLine
	for _, l := range strings.Split(text, "\n") {
		class := "ctx"
		switch {
		case strings.HasPrefix(l, "+++"), strings.HasPrefix(l, "---"):
			class = "file"
		case strings.HasPrefix(l, "@@"):
			class = "hunk"
		case strings.HasPrefix(l, "+"):
			class = "add"
		case strings.HasPrefix(l, "-"):
			class = "del"
		}
		out = append(out, diffLine{Class: class, Text: safetext.Escape(l)})
	}
	return out
}

// timeline puts the two captures, the tenant's job where known and each
// involved process's start in order.
func timeline(in BundleInput, procs []process) []event {
	var evs []event
	add := func(t time.Time, what string) {
		if !t.IsZero() {
			evs = append(evs, event{At: t, Time: formatTime(t), What: what})
		}
	}
	add(in.Before.Host.CaptureStart, fmt.Sprintf("FROM snapshot %s (%s) taken", safetext.Escape(in.Before.ID), safetext.Escape(in.Before.Label)))
	tenant := "the tenant"
	if in.Result.Tenant != "" {
		tenant = "tenant " + safetext.Escape(in.Result.Tenant)
	}
	add(in.TenantStart, tenant+" started")
	add(in.TenantEnd, tenant+" ended")
	byKey := processIndex(in)
	for _, p := range procs {
		if sp := byKey[p.Key]; sp != nil {
			add(sp.Started, fmt.Sprintf("process %s (%s) started", p.Key, p.Comm))
		}
	}
	// What a record dates (an Xid the kernel logged) stands where it happened.
	for _, f := range in.Result.Findings {
		if f.Time != nil {
			add(*f.Time, fmt.Sprintf("%s: %s", f.Kind, safetext.Escape(f.Summary)))
		}
	}
	add(in.After.Host.CaptureStart, fmt.Sprintf("TO snapshot %s (%s) taken", safetext.Escape(in.After.ID), safetext.Escape(in.After.Label)))
	evs = append(evs, watchEvents(in, procs)...)
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].At.Before(evs[j].At) })
	return evs
}

// maxTimelineEvents bounds the watch's events on the time line, since a
// tenant can open a device as often as it likes.
const maxTimelineEvents = 500

// watchEvents are the time line's lines from the event log, the watch's
// starts, stops and losses, NVML's ECC errors and lost GPUs, and every
// event of a process a finding names.
func watchEvents(in BundleInput, procs []process) []event {
	if in.Events == nil {
		return nil
	}
	involved := make(map[string]bool, len(procs))
	for _, p := range procs {
		involved[p.Key] = true
	}
	var out []event
	_ = in.Events.Each(func(e *eventlog.Event) bool {
		var what string
		switch {
		case e.Kind == eventlog.KindWatchStart:
			what = "gpusnap watch started (" + e.Mode + " mode)"
		case e.Kind == eventlog.KindWatchStop:
			what = "gpusnap watch stopped"
		case e.Kind == eventlog.KindLost && e.Lost == 0:
			what = "gpusnap watch: events lost (" + e.Note + ")"
		case e.Kind == eventlog.KindLost:
			what = fmt.Sprintf("gpusnap watch: the kernel dropped events (%d since the watch started)", e.Lost)
		case e.Kind == eventlog.KindGPUEvent && e.GPUEvent != eventlog.GPUEventXid:
			// An Xid stands on the time line as its xid_error finding.
			what = "NVML: " + e.GPUEventText()
		case e.Process != nil && (involved[e.Process.Key()] || e.Child != nil && involved[e.Child.Key()]):
			what = "process " + e.Process.Key() + " (" + e.Process.Comm + "): " + e.Kind
			if e.Device != nil {
				what += " " + e.Device.Path + " " + e.Access + e.Perms
			}
			if e.Child != nil {
				what += " " + e.Child.Key()
			}
		default:
			return true
		}
		if len(out) == maxTimelineEvents {
			out = append(out, event{At: e.Time, Time: formatTime(e.Time), What: "... more events in the event log (gpusnap events)"})
			return false
		}
		out = append(out, event{At: e.Time, Time: formatTime(e.Time), What: safetext.Escape(what)})
		return true
	})
	return out
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return "unknown"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000 UTC")
}

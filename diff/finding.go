// Package diff compares two snapshots and reports what the second holds that
// the first did not, as the findings an operator acts on. Each rule is a
// function of the two snapshots that returns its findings and notes what it
// could not judge. diff never reads /proc.
package diff

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpusnap/gpusnap/snapshot"
)

// Severity orders findings, from info through low, medium and high to
// critical.
type Severity int

// The severities, lowest first.
const (
	Info Severity = iota
	Low
	Medium
	High
	Critical
)

var severityNames = []string{"info", "low", "medium", "high", "critical"}

func (s Severity) String() string {
	if s < Info || s > Critical {
		return fmt.Sprintf("severity(%d)", int(s))
	}
	return severityNames[s]
}

// ParseSeverity reads a severity name, as --fail-on takes it.
func ParseSeverity(name string) (Severity, error) {
	for i, n := range severityNames {
		if strings.EqualFold(name, n) {
			return Severity(i), nil
		}
	}
	return Info, fmt.Errorf("unknown severity %q (want one of %s)", name, strings.Join(severityNames, ", "))
}

// HighestRaised is the highest severity any rule raises. A --fail-on above
// it could never fail a diff, so it would turn the gate off without a word.
const HighestRaised = High

// FailOn is what makes a diff or a check fail (--fail-on), a finding at or
// above a severity or one whose triage class is listed. With classes and no
// severity (ClassesOnly), only the classes fail it. The zero value fails on
// every finding, so a gate whose options were forgotten fails closed.
type FailOn struct {
	Severity    Severity
	ClassesOnly bool
	Classes     []string
}

// AtLeast fails on a finding at or above s.
func AtLeast(s Severity) FailOn { return FailOn{Severity: s} }

// String writes the list as --fail-on takes it.
func (f FailOn) String() string {
	var parts []string
	if !f.ClassesOnly {
		parts = append(parts, f.Severity.String())
	}
	return strings.Join(append(parts, f.Classes...), ",")
}

// fails reports whether finding x fails the gate.
func (f FailOn) fails(x *Finding) bool {
	return (!f.ClassesOnly && x.Severity >= f.Severity) || (x.Triage != nil && slices.Contains(f.Classes, x.Triage.Class))
}

// ParseFailOn reads a --fail-on list of at most one severity some rule
// raises and triage classes, comma-separated.
func ParseFailOn(list string) (FailOn, error) {
	f := FailOn{ClassesOnly: true}
	for name := range strings.SplitSeq(list, ",") {
		name = strings.TrimSpace(name)
		if slices.Contains(Classes, name) {
			f.Classes = append(f.Classes, name)
			continue
		}
		s, err := ParseSeverity(name)
		switch {
		case err != nil:
			return f, fmt.Errorf("%q is neither a severity (%s) nor a triage class (%s)", name, strings.Join(severityNames, ", "), strings.Join(Classes, ", "))
		case !f.ClassesOnly:
			return f, fmt.Errorf("%q: one severity at most", list)
		case s > HighestRaised:
			return f, fmt.Errorf("no finding is ever %s (the highest is %s): --fail-on %s could never fail, and would let every dirty host pass", s, HighestRaised, name)
		}
		f.Severity, f.ClassesOnly = s, false
	}
	return f, nil
}

// MarshalJSON writes the severity's name.
func (s Severity) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// UnmarshalJSON reads a severity's name.
func (s *Severity) UnmarshalJSON(b []byte) error {
	var name string
	if err := json.Unmarshal(b, &name); err != nil {
		return err
	}
	v, err := ParseSeverity(name)
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// ProcessRef names the process a finding is about. The fields docs/spec.md
// (JSON) lists are always written, empty where unknown, so scripts can read
// them without a default.
type ProcessRef struct {
	PID         int       `json:"pid"`
	StartTime   uint64    `json:"start_time"`
	PPID        int       `json:"ppid"`
	State       string    `json:"state"`
	Started     time.Time `json:"started"`
	SystemdUnit string    `json:"systemd_unit"`
	UnitRestart string    `json:"unit_restart"`
	UnitTimer   string    `json:"unit_timer"`
	Wchan       string    `json:"wchan"`
	// Ancestry and Reparented place the process among its parents, where
	// the capture read them (it used a GPU).
	Ancestry    []snapshot.Ancestor `json:"ancestry"`
	Reparented  bool                `json:"reparented"`
	Comm        string              `json:"comm"`
	Exe         string              `json:"exe"`
	ExeDeleted  bool                `json:"exe_deleted,omitempty"`
	Cmdline     []string            `json:"cmdline,omitempty"`
	UID         int                 `json:"uid"`
	User        string              `json:"user"`
	Cgroup      string              `json:"cgroup"`
	ContainerID string              `json:"container_id"`
	PodUID      string              `json:"pod_uid,omitempty"`
	SlurmJobID  string              `json:"slurm_job_id,omitempty"`
	// Sockets are the process's internet sockets, where the capture read
	// them (it used a GPU).
	Sockets []snapshot.Socket `json:"sockets"`
	// ExeSHA256, HashStatus and Package say what binary the process ran
	// and who installed it, where the capture read them.
	ExeSHA256  string            `json:"exe_sha256,omitempty"`
	HashStatus string            `json:"hash_status,omitempty"`
	Package    *snapshot.Package `json:"package,omitempty"`
}

// Key is the process identity PID@STARTTIME.
func (p *ProcessRef) Key() string { return snapshot.ProcessKey(p.PID, p.StartTime) }

// Finding is one thing left behind.
type Finding struct {
	Kind     string      `json:"kind"`
	Severity Severity    `json:"severity"`
	Summary  string      `json:"summary"` // one human line
	Process  *ProcessRef `json:"process,omitempty"`
	Device   string      `json:"device,omitempty"`
	GPUUUID  string      `json:"gpu_uuid,omitempty"`
	// Time is when it happened, where a record says (the kernel log's).
	Time *time.Time `json:"time,omitempty"`
	// Evidence is the raw lines or numbers behind the finding (maps lines, fdinfo, NVML figures).
	Evidence []string `json:"evidence"`
	// InheritedFrom names the tenant process a surviving mapping came from ("PID@START (exe)").
	InheritedFrom string `json:"inherited_from,omitempty"`
	// Allowed names the --allow entry that downgraded this finding to info.
	Allowed string `json:"allowed,omitempty"`
	// Triage is the verdict on the finding's process (classify).
	Triage *Triage `json:"triage,omitempty"`
}

// Summary counts findings by severity.
type Summary struct {
	Total      int            `json:"total"`
	BySeverity map[string]int `json:"by_severity"`
	// Worst is the highest severity found, or "" when nothing was.
	Worst string `json:"worst,omitempty"`
	// Allowed counts the findings --allow downgraded to info.
	Allowed int `json:"allowed"`
}

// Result is what a diff reports.
type Result struct {
	From     string    `json:"from"`
	To       string    `json:"to"`
	FromTime time.Time `json:"from_time"` // capture start of FROM
	ToTime   time.Time `json:"to_time"`   // capture start of TO
	Tenant   string    `json:"tenant"`    // "" when neither snapshot names one, always written, as docs/spec.md's diff object has it
	Findings []Finding `json:"findings"`
	Summary  Summary   `json:"summary"`
	// MapsDiffs holds, with --maps-diff, a unified diff of each involved process's maps text, by PID@START.
	MapsDiffs map[string]string `json:"maps_diffs,omitempty"`
	// Notes say what the diff could not check (NVML unread at one end, a
	// different boot, unreadable processes), so a clean result is read for what it is.
	Notes []string `json:"notes,omitempty"`
	// Check is set on a check's result, with the GPUs checked and those
	// that could not be read. It has no FROM.
	Check *CheckScope `json:"check,omitempty"`
	// Complete is true when every part of the host was compared, every
	// process at TO read in full and NVML's memory figures read at both
	// ends. No findings and not complete is not clean, and the notes say
	// what was not compared.
	Complete bool `json:"complete"`
	// Utilization is what watch's samples show of the window, the shape
	// of each process's and GPU's use and each GPU's series for a chart.
	// Nil where the window holds no samples.
	Utilization *Utilization `json:"utilization,omitempty"`
	// StoreLog is the store's log after this result was recorded in it, the
	// head a later gpusnap store verify --checkpoint proves against.
	// Nil when the result was not recorded.
	StoreLog *LogHead `json:"store_log,omitempty"`
}

// LogHead names a state of the store's log (docs/store.md).
type LogHead struct {
	Origin string `json:"origin"`
	Size   uint64 `json:"size"`
	Root   string `json:"root"` // base64 of the RFC 6962 root hash, as checkpoints write it
}

// count writes "1 mapping" or "3 mappings".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

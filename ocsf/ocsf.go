// Package ocsf renders gpusnap's findings and watch's events as OCSF
// Detection Findings (class 2004, schema 1.8.0), one JSON object a line, for
// a SIEM's shipper (Fluent Bit, Vector, the OpenTelemetry collector) to
// read. docs/ocsf.md maps each field.
package ocsf

import (
	"crypto/sha256"
	"encoding/hex"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/gpusnap/gpusnap/diff"
)

// SchemaVersion is the OCSF release the events follow (metadata.version).
const SchemaVersion = "1.8.0"

// The class, its category and the one activity gpusnap reports. A finding
// is created each time a diff or check reports it.
const (
	categoryFindings = 2
	classDetection   = 2004
	activityCreate   = 1
	statusNew        = 1
)

// Finding is an OCSF Detection Finding, with the attributes gpusnap fills.
type Finding struct {
	ActivityID   int    `json:"activity_id"`
	ActivityName string `json:"activity_name"`
	CategoryUID  int    `json:"category_uid"`
	CategoryName string `json:"category_name"`
	ClassUID     int    `json:"class_uid"`
	ClassName    string `json:"class_name"`
	TypeUID      int    `json:"type_uid"`
	TypeName     string `json:"type_name"`
	SeverityID   int    `json:"severity_id"`
	Severity     string `json:"severity"`
	StatusID     int    `json:"status_id"`
	Status       string `json:"status"`
	Time         int64  `json:"time"` // ms since the epoch, as OCSF's timestamp_t
	Message      string `json:"message"`
	IsAlert      bool   `json:"is_alert"`
	// DispositionID and Disposition (the security_control profile) say what
	// gpusnap's triage makes of a diff's or check's finding (handlingOf).
	DispositionID int    `json:"disposition_id,omitempty"`
	Disposition   string `json:"disposition,omitempty"`

	Metadata    Metadata    `json:"metadata"`
	FindingInfo FindingInfo `json:"finding_info"`
	Device      Device      `json:"device"`
	Evidences   []Evidence  `json:"evidences,omitempty"`
	Resources   []Resource  `json:"resources,omitempty"`
}

// Metadata names the product and the schema. correlation_uid groups the
// findings of one run (its TO snapshot), and tenant_uid names the tenant
// diffed.
type Metadata struct {
	Product Product `json:"product"`
	Version string  `json:"version"`
	LogName string  `json:"log_name"`
	// Profiles names the OCSF profiles whose attributes a finding carries.
	Profiles       []string `json:"profiles,omitempty"`
	CorrelationUID string   `json:"correlation_uid,omitempty"`
	TenantUID      string   `json:"tenant_uid,omitempty"`
}

// Product is gpusnap and its version.
type Product struct {
	Name       string `json:"name"`
	VendorName string `json:"vendor_name"`
	Version    string `json:"version"`
}

// FindingInfo identifies the finding. uid is the same for the same host,
// kind, process identity and device in every run, so a SIEM folds repeats.
type FindingInfo struct {
	UID         string   `json:"uid"`
	Title       string   `json:"title"`
	Desc        string   `json:"desc"`
	Types       []string `json:"types"`
	CreatedTime int64    `json:"created_time"`
	// ModifiedTime is when an update or close (Followups) changed it.
	ModifiedTime int64    `json:"modified_time,omitempty"`
	Analytic     Analytic `json:"analytic"`
}

// Analytic is the gpusnap rule that raised the finding.
type Analytic struct {
	Name   string `json:"name"`
	TypeID int    `json:"type_id"`
	Type   string `json:"type"`
}

// Device is the host the finding is on.
type Device struct {
	Hostname string `json:"hostname"`
	Name     string `json:"name"`
	TypeID   int    `json:"type_id"`
	Type     string `json:"type"`
}

// Evidence is what raised the finding, the process, the device node and the
// raw lines behind it (data).
type Evidence struct {
	Process *Process       `json:"process,omitempty"`
	File    *File          `json:"file,omitempty"`
	Data    map[string]any `json:"data,omitempty"`
}

// Process is a process by identity (uid PID@STARTTIME), name, command line,
// executable and user.
type Process struct {
	PID     int    `json:"pid"`
	UID     string `json:"uid"`
	Name    string `json:"name,omitempty"`
	CmdLine string `json:"cmd_line,omitempty"`
	File    *File  `json:"file,omitempty"`
	User    *User  `json:"user,omitempty"`
}

// File is an executable or a device node.
type File struct {
	Name   string        `json:"name"`
	Path   string        `json:"path"`
	TypeID int           `json:"type_id"`
	Type   string        `json:"type"`
	Hashes []Fingerprint `json:"hashes,omitempty"`
}

// Fingerprint is a file's hash.
type Fingerprint struct {
	AlgorithmID int    `json:"algorithm_id"`
	Algorithm   string `json:"algorithm"`
	Value       string `json:"value"`
}

// User is a process's owner.
type User struct {
	Name string `json:"name,omitempty"`
	UID  string `json:"uid"`
}

// Resource is what the finding is about or whose it is, the GPU, the host,
// or the pod, Slurm job or container of the process.
type Resource struct {
	Type     string `json:"type"`
	UID      string `json:"uid,omitempty"`
	Name     string `json:"name,omitempty"`
	Hostname string `json:"hostname,omitempty"`
	RoleID   int    `json:"role_id"`
	Role     string `json:"role"`
}

// Source says where a batch of findings comes from, naming the host,
// gpusnap's version and the command that found them.
type Source struct {
	Host    string
	Version string
	Command string // diff, check or events, logged as metadata.log_name "gpusnap COMMAND"
}

// severities maps gpusnap's severities to OCSF's severity_id and name.
var severities = map[diff.Severity]struct {
	id   int
	name string
}{
	diff.Info: {1, "Informational"}, diff.Low: {2, "Low"}, diff.Medium: {3, "Medium"},
	diff.High: {4, "High"}, diff.Critical: {5, "Critical"},
}

// The security_control profile's dispositions gpusnap writes (the
// dictionary's disposition_id enum).
const (
	profileSecurityControl = "security_control"
	dispositionAllowed     = 1
	dispositionDetected    = 15
	dispositionLogged      = 17
	dispositionAlert       = 19
)

var dispositions = map[int]string{dispositionAllowed: "Allowed", dispositionDetected: "Detected", dispositionLogged: "Logged", dispositionAlert: "Alert"}

// handling is what a SIEM is to do with a finding, given as its severity,
// its disposition and whether it alerts.
type handling struct {
	severity    diff.Severity
	disposition int
	alert       bool
}

// handlingOf maps a finding's triage to its handling, so that what the
// operator must do decides who is woken. A suspected compromise is critical
// and alerts. Another team's job is logged, low and no alert (its owner is
// asked, nobody paged). Any other alerts from medium up. docs/ocsf.md has
// the table.
func handlingOf(f *diff.Finding) handling {
	class := ""
	if f.Triage != nil {
		class = f.Triage.Class
	}
	switch {
	case f.Allowed != "":
		return handling{f.Severity, dispositionAllowed, false}
	case class == diff.ClassSuspectedCompromise:
		return handling{diff.Critical, dispositionAlert, true}
	case class == diff.ClassAnotherTenant:
		return handling{min(f.Severity, diff.Low), dispositionLogged, false}
	case f.Severity >= diff.Medium:
		return handling{f.Severity, dispositionAlert, true}
	}
	return handling{f.Severity, dispositionDetected, false}
}

// FromResult renders each finding of a diff's or check's result.
func FromResult(r *diff.Result, src Source) []Finding {
	out := make([]Finding, 0, len(r.Findings))
	for i := range r.Findings {
		f := &r.Findings[i]
		at := r.ToTime
		if f.Time != nil {
			at = *f.Time
		}
		h := handlingOf(f)
		o := newFinding(src, f.Kind, f.Summary, h.severity, at, identity(f.Process), f.Device, f.GPUUUID)
		o.IsAlert, o.DispositionID, o.Disposition = h.alert, h.disposition, dispositions[h.disposition]
		o.Metadata.Profiles = []string{profileSecurityControl}
		o.Metadata.CorrelationUID, o.Metadata.TenantUID = r.To, r.Tenant
		if rule := diff.RuleOf(f.Kind); rule != nil {
			o.FindingInfo.Title = rule.Title
		}
		ev := Evidence{Process: process(f.Process), File: deviceFile(f.Device), Data: map[string]any{"evidence": f.Evidence}}
		if f.InheritedFrom != "" {
			ev.Data["inherited_from"] = f.InheritedFrom
		}
		if f.Process != nil && f.Process.ExeDeleted {
			ev.Data["exe_deleted"] = true // the path is what the executable was
		}
		if f.Allowed != "" {
			ev.Data["allowed"] = f.Allowed
		}
		if t := f.Triage; t != nil {
			ev.Data["triage"] = t
		}
		o.Evidences = []Evidence{ev}
		if p := f.Process; p != nil {
			o.Resources = append(o.Resources, attribution(p.PodUID, p.SlurmJobID, p.ContainerID)...)
		}
		out = append(out, o)
	}
	return out
}

// newFinding fills what every finding has. uid hashes host, kind, process
// identity and device (node and GPU), each ended by a NUL so no two
// differently split tuples hash alike.
func newFinding(src Source, kind, summary string, sev diff.Severity, at time.Time, proc, device, gpu string) Finding {
	s := severities[sev]
	h := sha256.New()
	for _, part := range []string{src.Host, kind, proc, device, gpu} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	ms := at.UnixMilli()
	f := Finding{
		ActivityID: activityCreate, ActivityName: "Create",
		CategoryUID: categoryFindings, CategoryName: "Findings",
		ClassUID: classDetection, ClassName: "Detection Finding",
		TypeUID: classDetection*100 + activityCreate, TypeName: "Detection Finding: Create",
		SeverityID: s.id, Severity: s.name,
		StatusID: statusNew, Status: "New",
		Time: ms, Message: summary,
		Metadata: Metadata{
			Product: Product{Name: "gpusnap", VendorName: "gpusnap", Version: src.Version},
			Version: SchemaVersion, LogName: "gpusnap " + src.Command,
		},
		FindingInfo: FindingInfo{
			UID: hex.EncodeToString(h.Sum(nil)[:16]), Title: kind, Desc: summary, Types: []string{kind}, CreatedTime: ms,
			Analytic: Analytic{Name: kind, TypeID: 1, Type: "Rule"},
		},
		Device: Device{Hostname: src.Host, Name: src.Host, TypeID: 1, Type: "Server"},
	}
	if gpu != "" {
		f.Resources = append(f.Resources, Resource{Type: "GPU", UID: gpu, Name: path.Base(device), RoleID: 3, Role: "Affected"})
	}
	f.Resources = append(f.Resources, Resource{Type: "Host", Name: src.Host, Hostname: src.Host, RoleID: 3, Role: "Affected"})
	return f
}

// attribution is the pod, Slurm job and container a process ran in, the
// tenant's side of the finding.
func attribution(pod, job, container string) []Resource {
	var out []Resource
	for _, r := range []struct{ typ, uid string }{{"Kubernetes Pod", pod}, {"Slurm Job", job}, {"Container", container}} {
		if r.uid != "" {
			out = append(out, Resource{Type: r.typ, UID: r.uid, RoleID: 2, Role: "Actor"})
		}
	}
	return out
}

func identity(p *diff.ProcessRef) string {
	if p == nil {
		return ""
	}
	return p.Key()
}

// process renders a finding's process, or nil when none is involved.
func process(p *diff.ProcessRef) *Process {
	if p == nil {
		return nil
	}
	return &Process{
		PID: p.PID, UID: p.Key(), Name: p.Comm, CmdLine: strings.Join(p.Cmdline, " "),
		File: exeFile(p.Exe, p.ExeSHA256),
		User: &User{Name: p.User, UID: strconv.Itoa(p.UID)},
	}
}

// exeFile is a process's executable, with its SHA-256 where known.
func exeFile(exe, sha string) *File {
	if exe == "" {
		return nil
	}
	f := &File{Name: path.Base(exe), Path: exe, TypeID: 1, Type: "Regular File"}
	if sha != "" {
		f.Hashes = []Fingerprint{{AlgorithmID: 3, Algorithm: "SHA-256", Value: sha}}
	}
	return f
}

// deviceFile is a device node. Its type (character or block) is not in the
// finding, so OCSF's Unknown says so rather than guess.
func deviceFile(dev string) *File {
	if dev == "" {
		return nil
	}
	return &File{Name: path.Base(dev), Path: dev, TypeID: 0, Type: "Unknown"}
}

// Package metrics turns what gpusnap saw into Prometheus metrics. A diff or
// check result becomes a node_exporter textfile, and a running watch serves
// its families on /metrics (docs/metrics.md).
//
// No family has a PID, exe, pod, job or tenant label, since a series per
// process is the cardinality trap of process exporters. Every label is
// bounded.
package metrics

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/protobuf/proto"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/internal/safefile"
	"github.com/gpusnap/gpusnap/snapshot"
)

// Verdict is how a run ended, as its exit status says.
type Verdict string

// The verdicts, one for each exit status.
const (
	VerdictClean    Verdict = "clean"    // exit 0, nothing at or above --fail-on
	VerdictFindings Verdict = "findings" // exit 1, something at or above --fail-on
	VerdictError    Verdict = "error"    // exit 2, the run could not say
)

// verdicts are every value of gpusnap_last_run_verdict's verdict label. Each
// is written, 1 for the run's and 0 for the others, so a query for one
// verdict finds a series whatever the run said.
var verdicts = []Verdict{VerdictClean, VerdictFindings, VerdictError}

// Run is what one run of a command saw.
type Run struct {
	Command string    // "diff", "check"
	End     time.Time // when the run ended
	Verdict Verdict
	// Findings are the run's findings, after --allow.
	Findings []diff.Finding
	// GPUs are the GPUs of the run's newest capture (snapshot.GPUUsage), for
	// the memory no live process accounts for. They are nil when NVML was not
	// read.
	GPUs []snapshot.GPUUse
	// Unchecked counts what the run could not check (its report's notes).
	Unchecked int
	// StoreLog is the store's log after the run was recorded, or nil when it
	// was not.
	StoreLog *diff.LogHead
	// Reaped are a reap's actions, each its step and its result.
	Reaped []Reaped
}

// Reaped is one action of gpusnap reap, its step (terminate ...) and what it
// came to (done, gone, skipped, failed, left).
type Reaped struct{ Step, Result string }

// Set is the metric families of one gpusnap process. It holds them itself,
// not on a client_golang registry, because that package's initialisers cost
// every command its start-up (docs/performance.md, Start-up) and the run
// families are gauges a map holds. Gather gives them in the registry's form.
type Set struct {
	mu          sync.Mutex // a watch's scrapes gather while it runs
	build       *family
	findings    *family
	unaccounted *family
	runTime     *family
	runVerdict  *family
	unchecked   *family
	logSize     *family
	logRoot     *family
	reaped      *family
	version     string
}

// family is one gauge family. Its first label is always command, and a
// series is keyed by its label values joined.
type family struct {
	name, help string
	labels     []string
	series     map[string]*series
}

type series struct {
	values []string
	value  float64
}

func newFamily(name, help string, labels ...string) *family {
	return &family{name: name, help: help, labels: labels, series: map[string]*series{}}
}

// at is the series of the label values, made at 0 when it is new.
func (f *family) at(values ...string) *series {
	key := strings.Join(values, "\xff")
	sr := f.series[key]
	if sr == nil {
		sr = &series{values: values}
		f.series[key] = sr
	}
	return sr
}

// forget drops every series of a command.
func (f *family) forget(command string) {
	for k, sr := range f.series {
		if sr.values[0] == command {
			delete(f.series, k)
		}
	}
}

// gather is the family as client_golang's registry gathers it: labels in
// name order, series in the order of their values, none for an empty
// family. A label value that is not UTF-8 is an error, as it is there.
func (f *family) gather() (*dto.MetricFamily, error) {
	if len(f.series) == 0 {
		return nil, nil
	}
	order := make([]int, len(f.labels))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(f.labels[a], f.labels[b]) })
	mf := &dto.MetricFamily{Name: proto.String(f.name), Help: proto.String(f.help), Type: dto.MetricType_GAUGE.Enum()}
	for _, sr := range f.series {
		m := &dto.Metric{Gauge: &dto.Gauge{Value: proto.Float64(sr.value)}}
		for _, i := range order {
			if !utf8.ValidString(sr.values[i]) {
				return nil, fmt.Errorf("%s: label %s: value %q is not UTF-8", f.name, f.labels[i], sr.values[i])
			}
			m.Label = append(m.Label, &dto.LabelPair{Name: proto.String(f.labels[i]), Value: proto.String(sr.values[i])})
		}
		mf.Metric = append(mf.Metric, m)
	}
	slices.SortFunc(mf.Metric, func(a, b *dto.Metric) int {
		for i := range a.Label {
			if c := strings.Compare(a.Label[i].GetValue(), b.Label[i].GetValue()); c != 0 {
				return c
			}
		}
		return 0
	})
	return mf, nil
}

// New makes the run families and gpusnap_build_info. Every family carries a
// command label because a diff and a check textfile sit side by side in
// node_exporter's directory, and node_exporter refuses the same series from
// two files.
func New(version string) *Set {
	return &Set{
		build: newFamily("gpusnap_build_info",
			"Always 1: the gpusnap version and Go version the command was built with.",
			"command", "version", "goversion"),
		findings: newFamily("gpusnap_findings",
			"Findings of the command's last run, by kind, severity (after --allow) and triage class (none for a finding without one); a combination found nothing has no series.",
			"command", "kind", "severity", "class"),
		unaccounted: newFamily("gpusnap_gpu_unaccounted_memory_bytes",
			"GPU memory in use that no live process accounts for (a ghost's context under a dead PID counts), at the command's last capture; no series for a GPU where it cannot be told.",
			"command", "gpu_uuid"),
		runTime: newFamily("gpusnap_last_run_timestamp_seconds",
			"When the command's last run ended, in seconds since the Unix epoch.",
			"command"),
		runVerdict: newFamily("gpusnap_last_run_verdict",
			"1 for the verdict of the command's last run (clean: exit 0, findings: exit 1, error: exit 2), 0 for the others.",
			"command", "verdict"),
		unchecked: newFamily("gpusnap_last_run_unchecked",
			"What the command's last run could not check (NVML unread, refused processes, another boot): the notes of its report.",
			"command"),
		logSize: newFamily("gpusnap_store_log_size",
			"Leaves of the store's log once the command's last run was recorded in it; no series when it was not.",
			"command", "origin"),
		logRoot: newFamily("gpusnap_store_log_root_info",
			"Always 1: the root hash (base64) of the store's log once the command's last run was recorded in it.",
			"command", "origin", "size", "root"),
		reaped: newFamily("gpusnap_reap_actions",
			"Actions of gpusnap reap's last run, by step and outcome; a step and outcome that did not occur has no series.",
			"command", "step", "result"),
		version: version,
	}
}

// Gather is every family with a series, by name, as a prometheus.Gatherer
// gives them (a watch serves them beside its own).
func (s *Set) Gather() ([]*dto.MetricFamily, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*dto.MetricFamily
	for _, f := range []*family{s.build, s.findings, s.unaccounted, s.runTime, s.runVerdict, s.unchecked, s.logSize, s.logRoot, s.reaped} {
		mf, err := f.gather()
		if err != nil {
			return nil, err
		}
		if mf != nil {
			out = append(out, mf)
		}
	}
	slices.SortFunc(out, func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) })
	return out, nil
}

// Observe records a run, replacing what the command's last run recorded.
func (s *Set) Observe(r Run) {
	s.SetBuild(r.Command)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.findings.forget(r.Command)
	for i := range r.Findings {
		f := &r.Findings[i]
		s.findings.at(r.Command, f.Kind, f.Severity.String(), findingClass(f)).value++
	}
	s.unaccounted.forget(r.Command)
	for i := range r.GPUs {
		g := &r.GPUs[i]
		if u := g.Unaccounted; u != nil && g.UUID != "" {
			s.unaccounted.at(r.Command, g.UUID).value = float64(*u)
		}
	}
	s.runTime.at(r.Command).value = float64(r.End.UnixNano()) / 1e9
	for _, v := range verdicts {
		s.runVerdict.at(r.Command, string(v)).value = boolValue(v == r.Verdict)
	}
	s.unchecked.at(r.Command).value = float64(r.Unchecked)
	s.reaped.forget(r.Command)
	for _, a := range r.Reaped {
		s.reaped.at(r.Command, a.Step, a.Result).value++
	}
	s.logSize.forget(r.Command)
	s.logRoot.forget(r.Command)
	if l := r.StoreLog; l != nil {
		s.logSize.at(r.Command, l.Origin).value = float64(l.Size)
		s.logRoot.at(r.Command, l.Origin, strconv.FormatUint(l.Size, 10), l.Root).value = 1
	}
}

// SetBuild writes gpusnap_build_info for a command.
func (s *Set) SetBuild(command string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.build.at(command, s.version, runtime.Version()).value = 1
}

// WriteTextfile writes every family to path for node_exporter's textfile
// collector through safefile.Create, as every file gpusnap writes. It writes
// a temporary file beside path, readable by all (the collector runs as its
// own user), and renames it over path, so the collector never reads half a
// file. It never writes through a symbolic link (the file's own or, as root,
// another user's directory).
func (s *Set) WriteTextfile(ctx context.Context, path string) error {
	fams, err := s.Gather()
	if err == nil {
		err = safefile.Create(ctx, path, 0o644, true, func(w io.Writer) error {
			for _, mf := range fams {
				if _, err := expfmt.MetricFamilyToText(w, mf); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err != nil {
		return fmt.Errorf("textfile %s: %w", path, err)
	}
	return nil
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// findingClass is a finding's triage class, the bounded value of the class
// label (diff.Classes), or "none" for a finding about no process.
func findingClass(f *diff.Finding) string {
	if f.Triage == nil {
		return "none"
	}
	return f.Triage.Class
}

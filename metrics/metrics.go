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
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

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

// Set is the metric families of one gpusnap process, on their own registry.
type Set struct {
	reg         *prometheus.Registry
	build       *prometheus.GaugeVec
	findings    *prometheus.GaugeVec
	unaccounted *prometheus.GaugeVec
	runTime     *prometheus.GaugeVec
	runVerdict  *prometheus.GaugeVec
	unchecked   *prometheus.GaugeVec
	logSize     *prometheus.GaugeVec
	logRoot     *prometheus.GaugeVec
	reaped      *prometheus.GaugeVec
	version     string
}

// New registers the run families and gpusnap_build_info on a new registry.
// Every family carries a command label because a diff and a check textfile
// sit side by side in node_exporter's directory, and node_exporter refuses
// the same series from two files.
func New(version string) *Set {
	s := &Set{
		reg: prometheus.NewRegistry(),
		build: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpusnap_build_info",
			Help: "Always 1: the gpusnap version and Go version the command was built with.",
		}, []string{"command", "version", "goversion"}),
		findings: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpusnap_findings",
			Help: "Findings of the command's last run, by kind, severity (after --allow) and triage class (none for a finding without one); a combination found nothing has no series.",
		}, []string{"command", "kind", "severity", "class"}),
		unaccounted: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpusnap_gpu_unaccounted_memory_bytes",
			Help: "GPU memory in use that no live process accounts for (a ghost's context under a dead PID counts), at the command's last capture; no series for a GPU where it cannot be told.",
		}, []string{"command", "gpu_uuid"}),
		runTime: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpusnap_last_run_timestamp_seconds",
			Help: "When the command's last run ended, in seconds since the Unix epoch.",
		}, []string{"command"}),
		runVerdict: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpusnap_last_run_verdict",
			Help: "1 for the verdict of the command's last run (clean: exit 0, findings: exit 1, error: exit 2), 0 for the others.",
		}, []string{"command", "verdict"}),
		unchecked: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpusnap_last_run_unchecked",
			Help: "What the command's last run could not check (NVML unread, refused processes, another boot): the notes of its report.",
		}, []string{"command"}),
		logSize: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpusnap_store_log_size",
			Help: "Leaves of the store's log once the command's last run was recorded in it; no series when it was not.",
		}, []string{"command", "origin"}),
		logRoot: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpusnap_store_log_root_info",
			Help: "Always 1: the root hash (base64) of the store's log once the command's last run was recorded in it.",
		}, []string{"command", "origin", "size", "root"}),
		reaped: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpusnap_reap_actions",
			Help: "Actions of gpusnap reap's last run, by step and outcome; a step and outcome that did not occur has no series.",
		}, []string{"command", "step", "result"}),
	}
	s.reg.MustRegister(s.build, s.findings, s.unaccounted, s.runTime, s.runVerdict, s.unchecked, s.logSize, s.logRoot, s.reaped)
	s.version = version
	return s
}

// Registry is where the families are registered, for a caller's own.
func (s *Set) Registry() *prometheus.Registry { return s.reg }

// Observe records a run, replacing what the command's last run recorded.
func (s *Set) Observe(r Run) {
	s.setBuild(r.Command)
	s.findings.DeletePartialMatch(prometheus.Labels{"command": r.Command})
	for i := range r.Findings {
		f := &r.Findings[i]
		s.findings.WithLabelValues(r.Command, f.Kind, f.Severity.String(), findingClass(f)).Inc()
	}
	s.unaccounted.DeletePartialMatch(prometheus.Labels{"command": r.Command})
	for i := range r.GPUs {
		g := &r.GPUs[i]
		if u := g.Unaccounted; u != nil && g.UUID != "" {
			s.unaccounted.WithLabelValues(r.Command, g.UUID).Set(float64(*u))
		}
	}
	s.runTime.WithLabelValues(r.Command).Set(float64(r.End.UnixNano()) / 1e9)
	for _, v := range verdicts {
		s.runVerdict.WithLabelValues(r.Command, string(v)).Set(boolValue(v == r.Verdict))
	}
	s.unchecked.WithLabelValues(r.Command).Set(float64(r.Unchecked))
	s.reaped.DeletePartialMatch(prometheus.Labels{"command": r.Command})
	for _, a := range r.Reaped {
		s.reaped.WithLabelValues(r.Command, a.Step, a.Result).Inc()
	}
	s.logSize.DeletePartialMatch(prometheus.Labels{"command": r.Command})
	s.logRoot.DeletePartialMatch(prometheus.Labels{"command": r.Command})
	if l := r.StoreLog; l != nil {
		s.logSize.WithLabelValues(r.Command, l.Origin).Set(float64(l.Size))
		s.logRoot.WithLabelValues(r.Command, l.Origin, strconv.FormatUint(l.Size, 10), l.Root).Set(1)
	}
}

// setBuild writes gpusnap_build_info for a command.
func (s *Set) setBuild(command string) {
	s.build.WithLabelValues(command, s.version, runtime.Version()).Set(1)
}

// WriteTextfile writes every family to path for node_exporter's textfile
// collector through safefile.Create, as every file gpusnap writes. It writes
// a temporary file beside path, readable by all (the collector runs as its
// own user), and renames it over path, so the collector never reads half a
// file. It never writes through a symbolic link (the file's own or, as root,
// another user's directory).
func (s *Set) WriteTextfile(ctx context.Context, path string) error {
	fams, err := s.reg.Gather()
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

//go:build !gpusnap_common

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/syslog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/internal/safefile"
	"github.com/gpusnap/gpusnap/kubelet/podresources"
	"github.com/gpusnap/gpusnap/metrics"
	"github.com/gpusnap/gpusnap/npd"
	"github.com/gpusnap/gpusnap/nri"
	"github.com/gpusnap/gpusnap/session"
	"github.com/gpusnap/gpusnap/snapshot"
)

// nriAction runs the plugin in this build, which links NRI.
func nriAction() cli.ActionFunc { return action(parseNRI, runNRI) }

// nriOptions are nri's flags.
type nriOptions struct {
	Socket, Evidence, SignKey, Syslog, Textfile string
	Allow                                       *diff.AllowList
	Pods                                        *podresources.Options
	CDISpecDirs                                 []string // where a container's CDI devices are looked up
	Reap                                        bool     // --reap ends a pod's leftovers at its end
	ReapGrace                                   time.Duration
}

func parseNRI(c *cli.Context) (nriOptions, error) {
	o := nriOptions{Socket: c.String("socket"), Evidence: c.String("evidence-dir"), SignKey: c.String("sign-key"),
		Syslog: c.String("syslog-socket"), Textfile: c.String("textfile"), Pods: parsePodFlags(c),
		CDISpecDirs: c.StringSlice("cdi-spec-dir"), Reap: c.Bool("reap"), ReapGrace: c.Duration("reap-grace")}
	switch {
	case o.Socket == "" || o.Evidence == "":
		return o, usageError(errors.New("--socket and --evidence-dir need a path"))
	case o.ReapGrace < 0:
		return o, usageError(fmt.Errorf("--reap-grace %s: want a duration of 0 or more (5s)", o.ReapGrace))
	}
	var err error
	o.Allow, err = loadAllow(c)
	return o, err
}

func runNRI(ctx context.Context, g globals, o nriOptions) error {
	if err := os.MkdirAll(o.Evidence, 0o700); err != nil {
		return fmt.Errorf("--evidence-dir: %w", err)
	}
	gate := &nriGate{g: g, o: o, checks: map[string]int{}}
	if o.Syslog == "" {
		if _, err := os.Stat("/dev/log"); err == nil {
			o.Syslog = "/dev/log"
		}
	}
	if o.Syslog != "" {
		w, err := syslog.Dial("unixgram", o.Syslog, syslog.LOG_ERR|syslog.LOG_DAEMON, "gpusnap")
		if err != nil {
			return fmt.Errorf("--syslog-socket: %w", err)
		}
		defer w.Close()
		gate.syslog = w
	}
	return nri.New(gate, g.Stderr, o.CDISpecDirs).Run(ctx, o.Socket)
}

// nriGate does the plugin's work by the commands' own code paths, baseline
// (session.Host.Baseline), check (checkHost, reportCheck) and diff --tenant
// (runDiff).
type nriGate struct {
	g      globals
	o      nriOptions
	syslog *syslog.Writer
	mu     sync.Mutex
	checks map[string]int // reports written per pod UID
}

// quiet is the globals with stdout to w, as the plugin's own stdout is no report.
func (n *nriGate) quiet(w io.Writer) globals {
	g := n.g
	g.Stdout, g.JSON = w, false
	return g
}

// Baseline stores the pod's baseline, and judges the allocation it
// recorded (the GPUs given, else the kubelet's) from that capture as Check
// judges one. The GPUs not clean are refused as Check refuses them, and the
// baseline is stored all the same. A pod the kubelet runs with no GPU is not
// judged.
func (n *nriGate) Baseline(ctx context.Context, pod nri.Pod, gpus *snapshot.GPUSet) (nri.Judged, error) {
	// The runtime's GPUs count, else the kubelet's, as the plugin's own
	// environment is not the pod's.
	var report bytes.Buffer
	g := n.quiet(&report)
	h := g.host()
	snap, err := h.CaptureBaseline(ctx, pod.UID, session.Allocation{Given: gpus, Pods: n.o.Pods})
	if err != nil {
		return nri.Judged{}, err
	}
	if _, _, err := h.Put(snap); err != nil {
		return nri.Judged{}, err
	}
	j := nri.Judged{Allocation: snap.Allocation}
	if j.Allocation == nil || j.Allocation.String() == "" {
		return j, nil
	}
	o := n.checkOptions(j.Allocation)
	r := judgeCapture(g, o, snap, &metrics.Run{}, snap.ID)
	j.NotClean = n.refusal(ctx, pod, g, o, r, snap.Host.Hostname, &report)
	return j, nil
}

func (n *nriGate) Check(ctx context.Context, pod nri.Pod, gpus *snapshot.GPUSet) error {
	o := n.checkOptions(gpus)
	var report bytes.Buffer
	g := n.quiet(&report)
	r, host, err := checkHost(ctx, g, o, &metrics.Run{})
	if err != nil {
		return err
	}
	return n.refusal(ctx, pod, g, o, r, host, &report)
}

// checkOptions are the plugin's check of gpus, with check's defaults and
// its --allow.
func (n *nriGate) checkOptions(gpus *snapshot.GPUSet) checkOptions {
	return checkOptions{CheckOptions: diff.CheckOptions{GPUs: gpus, ZombieThreshold: diff.DefaultZombieThreshold, Allow: n.o.Allow,
		FailOn: diff.AtLeast(diff.Medium)}, Window: defaultCheckWindow}
}

// refusal reports a check's result r into report, and returns nil when it
// is clean, else the one-line reason with the path of the report it wrote.
func (n *nriGate) refusal(ctx context.Context, pod nri.Pod, g globals, o checkOptions, r *diff.Result, host string, report *bytes.Buffer) error {
	if reportCheck(g, o, r, host) == nil {
		return nil
	}
	n.mu.Lock()
	n.checks[pod.UID]++
	name := filepath.Join(n.o.Evidence, fmt.Sprintf("pod-%s.check-%d.txt", pod.UID, n.checks[pod.UID]))
	n.mu.Unlock()
	line := npd.Line(r, o.FailOn)
	if err := safefile.Create(ctx, name, 0o600, true, func(w io.Writer) error { _, err := w.Write(report.Bytes()); return err }); err != nil {
		return fmt.Errorf("%s (its report not written: %v)", line, err)
	}
	return fmt.Errorf("%s; report %s", line, name)
}

// Diff runs diff --tenant POD_UID as the Slurm epilog does. It writes the
// bundle when something is found, keeps the report beside it unless clean,
// and sends one line to syslog and stderr.
func (n *nriGate) Diff(ctx context.Context, pod nri.Pod) {
	base := filepath.Join(n.o.Evidence, "pod-"+pod.UID)
	if n.o.Reap {
		n.reap(ctx, pod, base)
		return
	}
	o := diffOptions{Tenant: pod.UID, FailOn: diff.AtLeast(diff.Medium), Textfile: n.o.Textfile,
		Compare: diff.Options{ZombieThreshold: diff.DefaultZombieThreshold, Allow: n.o.Allow},
		Bundle:  diffBundle{path: base + ".tar.gz", signKey: n.o.SignKey, force: true}}
	var report, notes bytes.Buffer // the report first, its first line the verdict, then what stderr said after it
	g := n.quiet(&report)
	g.Stderr = &notes
	code := exitCode(runDiff(ctx, g, o), &notes)
	report.Write(notes.Bytes())
	if code == exitClean {
		n.say(false, "pod %s: clean", pod)
		return
	}
	werr := safefile.Create(ctx, base+".txt", 0o600, true, func(w io.Writer) error { _, err := w.Write(report.Bytes()); return err })
	where := "report " + base + ".txt"
	if werr != nil {
		where = "report not written: " + werr.Error()
	}
	lines := strings.Split(strings.TrimSpace(report.String()), "\n")
	if code == exitFindings {
		n.say(true, "pod %s left GPU state behind: %s; evidence %s.tar.gz, %s", pod, lines[0], base, where)
		return
	}
	n.say(true, "pod %s: node not checked: %s; %s", pod, lines[len(lines)-1], where)
}

// reap ends what the pod left, as gpusnap reap --tenant POD_UID --job-ended
// --yes does (the pod has ended), as the Slurm epilog does with
// GPUSNAP_REAP=1. It keeps its evidence in BASE.reap and its report in
// BASE.reap.txt (unless it was clean with nothing to do), and writes one
// line naming what it ended.
func (n *nriGate) reap(ctx context.Context, pod nri.Pod, base string) {
	o := reapOptions{Tenant: pod.UID, Yes: true, Grace: n.o.ReapGrace, MemoryLimit: defaultMemoryLimit,
		Evidence: base + ".reap", SignKey: n.o.SignKey, Textfile: n.o.Textfile,
		Compare: diff.Options{ZombieThreshold: diff.DefaultZombieThreshold, Allow: n.o.Allow, JobEnded: true}}
	var report, notes bytes.Buffer
	g := n.quiet(&report)
	g.Stderr = &notes
	rep, err := reapRun(ctx, g, o)
	code := exitCode(err, &notes)
	report.Write(notes.Bytes())
	ended := "nothing"
	if rep != nil && len(rep.Ended()) > 0 {
		ended = strings.Join(rep.Ended(), ", ")
	}
	where := "nothing kept" // clean, and nothing was done
	if code != exitClean || rep == nil || rep.Evidence != nil {
		where = "report " + base + ".reap.txt"
		if werr := safefile.Create(ctx, base+".reap.txt", 0o600, true, func(w io.Writer) error { _, err := w.Write(report.Bytes()); return err }); werr != nil {
			where = "report not written: " + werr.Error()
		}
		if rep != nil && rep.Evidence != nil {
			where = "evidence " + rep.Evidence.Dir + ", " + where
		}
	}
	lines := strings.Split(strings.TrimSpace(report.String()), "\n")
	switch code {
	case exitClean:
		n.say(ended != "nothing", "pod %s: reaped %s; clean after; %s", pod, ended, where)
	case exitFindings:
		n.say(true, "pod %s left GPU state that reap did not end (reaped %s): %s; %s", pod, ended, firstStillFound(lines), where)
	default:
		n.say(true, "pod %s: not reaped or not checked: %s; %s", pod, lines[len(lines)-1], where)
	}
}

// firstStillFound is the first finding reap's text names after its
// actions, else its last line.
func firstStillFound(lines []string) string {
	after := false
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "after: "):
			after = true
		case after && !strings.HasPrefix(l, "  gpu ") && strings.HasPrefix(l, "  "):
			return strings.TrimSpace(l)
		}
	}
	return lines[len(lines)-1]
}

func (n *nriGate) HasBaseline(uid string) (bool, error) { return n.g.host().HasBaseline(uid) }

// say writes a verdict line on stderr and, when alarm, to syslog.
func (n *nriGate) say(alarm bool, format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	warn(n.g, errors.New("nri: "+line))
	if alarm && n.syslog != nil {
		_ = n.syslog.Err(line)
	}
}

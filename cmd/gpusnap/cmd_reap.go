package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/internal/safetext"
	"github.com/gpusnap/gpusnap/metrics"
	"github.com/gpusnap/gpusnap/ocsf"
	"github.com/gpusnap/gpusnap/reap"
	"github.com/gpusnap/gpusnap/render"
	"github.com/gpusnap/gpusnap/session"
	"github.com/gpusnap/gpusnap/snapshot"
)

func reapCommand() *cli.Command {
	return &cli.Command{
		Name:  "reap",
		Usage: "end what a tenant left on its GPUs, by the findings' triage: a plan by default, --yes carries it out",
		UsageText: "gpusnap reap (--tenant T | --gpus LIST) [--yes] [--grace DUR] [--stop-units] [--memory-limit SIZE]\n\n" +
			"Judges as `gpusnap diff --tenant T` or `gpusnap check --gpus LIST` does, and plans, for each process\n" +
			"of the findings, what its triage calls for: one action a line, in the order it would run, each naming\n" +
			"the process by PID@START, the finding and the triage rule. Without --yes nothing is touched.\n" +
			"With --yes: the evidence bundle of the judgement is written and verified first (and, for a suspected\n" +
			"compromise, the process's memory outside device mappings kept); then the processes are frozen and\n" +
			"signalled through pidfds opened on the PID@START judged (SIGTERM, --grace, SIGKILL), and the same\n" +
			"judgement runs again. Never touched: an allowed process, the tenant's running job, another tenant's\n" +
			"process, an MPS server with live clients, a process in D state, a PID reused since the judgement.\n" +
			"Exit status: 0 every GPU asked about is clean (after --yes; without it, as the judgement says),\n" +
			"1 not clean, 2 error or not known to be clean. docs/reap.md has the decision table.\n\n" +
			"Examples:\n  gpusnap reap --tenant \"$SLURM_JOB_ID\"          # the plan\n" +
			"  gpusnap reap --tenant \"$SLURM_JOB_ID\" --yes --grace 10s\n" +
			"  gpusnap reap --gpus 0-3 --yes --stop-units --sign-key /etc/gpusnap/bundle.key",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "tenant", Usage: "judge tenant `T` as gpusnap diff --tenant does"},
			&cli.StringFlag{Name: "gpus", Usage: "judge the GPUs of `LIST` as gpusnap check --gpus does"},
			&cli.BoolFlag{Name: "yes", Usage: "carry the plan out (without it: print the plan, touch nothing)"},
			&cli.DurationFlag{Name: "grace", Value: 5 * time.Second, Usage: "how long a process has after SIGTERM before SIGKILL (`DUR`)"},
			&cli.BoolFlag{Name: "stop-units", Usage: "stop (systemctl stop) a restarting unit and its timer before ending its process; without it such a process is left"},
			&cli.StringFlag{Name: "memory-limit", Value: sizeText(defaultMemoryLimit), Usage: "keep at most `SIZE` of a suspected compromise's memory as evidence"},
			&cli.StringFlag{Name: "evidence", Usage: "write the evidence to `DIR` (default: reap/<judgement id> beside the store)"},
			&cli.StringFlag{Name: "sign-key", Usage: "sign the evidence bundle with the ed25519 private `KEY`"},
			&cli.StringFlag{Name: "zombie-threshold", Value: sizeText(diff.DefaultZombieThreshold), Usage: "as for gpusnap diff and check (`SIZE`)"},
			allowFlag("expected workloads: never reaped"),
			textfileFlag(),
			&cli.StringFlag{Name: "ocsf-file", Usage: "with --yes: append, for each process acted on, its findings as OCSF updates (closed when it was ended) to the JSON-lines `FILE`"},
			jobEndedFlag(),
		},
		Action: action(parseReap, runReap),
	}
}

// defaultMemoryLimit is --memory-limit's default. A worker's host memory is
// tens of GiB, and the evidence keeps its first part.
const defaultMemoryLimit = 1 << 30

// reapOptions are reap's flags.
type reapOptions struct {
	Tenant      string           // --tenant judges as diff --tenant does
	GPUs        *snapshot.GPUSet // --gpus judges as check --gpus does
	Yes         bool
	Grace       time.Duration
	StopUnits   bool
	MemoryLimit uint64
	Evidence    string // --evidence DIR, "" for beside the store
	SignKey     string
	Compare     diff.Options // --allow, --zombie-threshold, --job-ended (the tenant's own processes are leftovers)
	OCSFFile    string       // --ocsf-file, where the outcomes go as OCSF finding updates
	Textfile    string       // --textfile, where the actions and the verdict go as metrics
}

func parseReap(c *cli.Context) (reapOptions, error) {
	o := reapOptions{Tenant: c.String("tenant"), Yes: c.Bool("yes"), Grace: c.Duration("grace"), StopUnits: c.Bool("stop-units"),
		Evidence: c.String("evidence"), OCSFFile: c.String("ocsf-file"), Textfile: c.String("textfile"), SignKey: c.String("sign-key")}
	var err error
	if o.GPUs, err = gpuListFlag(c, "gpus", "reap"); err != nil {
		return o, err
	}
	switch {
	case (o.Tenant == "") == (o.GPUs == nil):
		return o, usageError(errors.New("reap needs one of --tenant T or --gpus LIST"))
	case o.Grace < 0:
		return o, usageError(fmt.Errorf("--grace %s: want a duration of 0 or more (5s)", o.Grace))
	}
	if o.MemoryLimit, err = parseSize(c.String("memory-limit")); err != nil {
		return o, usageError(fmt.Errorf("--memory-limit: %w", err))
	}
	if o.Compare, err = parseCompare(c); err != nil {
		return o, err
	}
	// --job-ended is the judgement's as much as the plan's, so that reap
	// and diff --job-ended give the job's processes one class.
	o.Compare.JobEnded = c.Bool("job-ended")
	return o, nil
}

// judgement is what reap acts on, a result and the host it judged.
type judgement struct {
	From   *snapshot.Snapshot // the baseline, nil for a check
	To     *snapshot.Snapshot
	Result *diff.Result
	Window diff.Options // the window the judgement read, for its bundle
	// Verdict is the judgement's answer, as check prints it.
	Verdict string
}

// judge judges as diff --tenant or check --gpus does, and records the
// result in the store's log as they do.
func (o reapOptions) judge(ctx context.Context, g globals, host *session.Host) (*judgement, error) {
	if o.Tenant != "" {
		p, err := host.Post(ctx, o.Tenant)
		if err != nil {
			return nil, err
		}
		if p.StoreErr != nil {
			warn(g, p.StoreErr)
		}
		opts := o.Compare
		r, err := host.Compare(p, &opts)
		if err != nil {
			return nil, err
		}
		j := &judgement{From: p.From, To: p.To, Result: r, Window: opts, Verdict: diff.VerdictClean}
		if r.Failed(diff.Medium) {
			j.Verdict = diff.VerdictNotClean
		}
		return j, nil
	}
	snap, err := host.Capture(ctx, snapshot.LabelSnapshot, "")
	if err != nil {
		return nil, err
	}
	co := diff.CheckOptions{GPUs: o.GPUs, ZombieThreshold: o.Compare.ZombieThreshold, Allow: o.Compare.Allow, FailOn: diff.AtLeast(diff.Medium)}
	co.Since = checkSince(g, snap, defaultCheckWindow)
	co.Events, co.LogProblems = host.Window(co.Since, snap)
	r := diff.Check(snap, co)
	return &judgement{From: diff.CheckBaseline(snap), To: snap, Result: r, Window: diff.Options{Events: co.Events}, Verdict: r.Check.Verdict}, nil
}

// reapReport is reap's output, which --json prints whole.
type reapReport struct {
	Tenant   string            `json:"tenant,omitempty"`
	GPUs     string            `json:"gpus,omitempty"`
	Judged   string            `json:"judged"` // the snapshot judged
	Verdict  string            `json:"verdict"`
	DryRun   bool              `json:"dry_run"`
	Plan     reap.Plan         `json:"plan"`
	Evidence *session.Evidence `json:"evidence,omitempty"`
	Outcomes []reap.Outcome    `json:"outcomes,omitempty"`
	// After is the same judgement, run again after the actions.
	After *reapAfter `json:"after,omitempty"`
}

// Ended names the processes the actions ended, by PID@START (comm).
func (r *reapReport) Ended() []string {
	var out []string
	for _, o := range r.Outcomes {
		t := o.Action.Process
		switch {
		case o.Result != reap.ResultDone:
			continue
		case o.Action.Step == reap.StepEndParent:
			t = *o.Action.Parent
		case o.Action.Step != reap.StepTerminate && o.Action.Step != reap.StepKillCgroup && o.Action.Step != reap.StepReapParent:
			continue
		}
		out = append(out, t.String())
	}
	return out
}

// reapAfter is the judgement run after the actions.
type reapAfter struct {
	Verdict string `json:"verdict"`
	// GPUs are the GPUs asked about, each clean or not. They are --gpus,
	// else the tenant's allocation, else every GPU the judgements saw.
	GPUs   []reap.GPUAfter `json:"gpus"`
	Result *diff.Result    `json:"result"`
}

// after is reap's proof from the judgement after the actions, a, of the
// GPUs asked about (before is the judgement acted on, whose GPUs count).
func (o reapOptions) after(a, before *judgement) *reapAfter {
	asked := o.GPUs
	if asked == nil && before.From != nil {
		asked = before.From.Allocation
	}
	return &reapAfter{Verdict: a.Verdict, Result: a.Result, GPUs: reap.GPUsAfter(a.Result, a.To, asked, diff.AtLeast(diff.Medium), before.To)}
}

// runReap is gpusnap reap.
func runReap(ctx context.Context, g globals, o reapOptions) error {
	_, err := reapRun(ctx, g, o)
	return err
}

// reapRun reaps, prints the report on g's stdout and records the run in
// --textfile's file (the actions by step and outcome, the findings after).
// It returns the report (nil when no judgement ran) and the error whose
// exit status is reap's. gpusnap reap and the NRI plugin's reap at a pod's
// end are this one function.
func reapRun(ctx context.Context, g globals, o reapOptions) (*reapReport, error) {
	run := metrics.Run{Command: "reap"}
	rep, err := reapAndReport(ctx, g, o, &run)
	return rep, writeTextfile(ctx, g.Stderr, o.Textfile, run, err)
}

// reapAndReport judges, plans, acts with --yes and judges again, filling
// run with what it did.
func reapAndReport(ctx context.Context, g globals, o reapOptions, run *metrics.Run) (*reapReport, error) {
	live := g.ProcRoot == "/proc"
	if o.Yes && !live {
		return nil, usageError(errors.New("reap --yes acts on the live host: it cannot be combined with --proc-root"))
	}
	host := g.host()
	host.Hold(true)
	j, err := o.judge(ctx, g, host)
	if err != nil {
		_ = host.Release()
		return nil, err
	}
	mnt := ""
	if live {
		mnt = reap.CgroupV2Mount()
	}
	plan := reap.Build(j.Result, j.To, reap.Options{StopUnits: o.StopUnits, JobEnded: o.Compare.JobEnded, Cgroups: reap.Cgroups(mnt)})
	rep := reapReport{Tenant: o.Tenant, Judged: j.To.ID, Verdict: j.Verdict, DryRun: !o.Yes, Plan: plan}
	if o.GPUs != nil {
		rep.GPUs = o.GPUs.String()
	}
	if !o.Yes || len(plan.Actions) == 0 && j.Verdict == diff.VerdictClean {
		if err := host.Release(); err != nil {
			warn(g, err)
		}
		if o.Yes {
			// With nothing found and nothing to do there is no evidence to
			// keep, and the judgement just run is the proof.
			rep.After = o.after(j, j)
		}
		return &rep, finishReap(g, rep, j.Verdict)
	}
	dir, b, err := o.evidenceBundle(g, host, j)
	if rerr := host.Release(); rerr != nil {
		warn(g, rerr)
	}
	var ev *session.Evidence
	if err == nil {
		ev, err = keepEvidence(ctx, host, dir, b, j)
	}
	if err != nil {
		// No evidence, no action. The plan is printed with why.
		_ = finishReap(g, rep, j.Verdict)
		return &rep, fmt.Errorf("reap: nothing done: %w", err)
	}
	rep.Evidence = ev
	actor := reap.Actor{Grace: o.Grace, CgroupRoot: mnt, KeepMemory: ev.KeepMemory(o.MemoryLimit)}
	rep.Outcomes = actor.Run(ctx, plan)
	for _, out := range rep.Outcomes {
		run.Reaped = append(run.Reaped, metrics.Reaped{Step: out.Action.Step, Result: out.Result})
	}
	recordActions(g, host, ev, rep.Outcomes, j)
	if err := o.appendOCSF(j, rep.Outcomes); err != nil {
		warn(g, fmt.Errorf("--ocsf-file: %w", err))
	}
	after, err := o.judge(ctx, g, host)
	if err != nil {
		warn(g, fmt.Errorf("the judgement after the actions: %w", err))
		rep.After = &reapAfter{Verdict: diff.VerdictUnknown}
		_ = finishReap(g, rep, diff.VerdictUnknown)
		return &rep, statusError{exitError}
	}
	rep.After = o.after(after, j)
	run.Findings, run.GPUs = after.Result.Findings, snapshot.GPUUsage(after.To)
	return &rep, finishReap(g, rep, after.Verdict)
}

// finishReap prints rep and returns the exit status verdict calls for.
func finishReap(g globals, rep reapReport, verdict string) error {
	var err error
	if g.JSON {
		err = render.JSON(g.Stdout, rep)
	} else {
		err = printReap(g, rep)
	}
	if err != nil {
		return err
	}
	switch verdict {
	case diff.VerdictClean:
		return nil
	case diff.VerdictNotClean:
		return statusError{exitFindings}
	}
	return statusError{exitError}
}

// printReap prints rep as text, with the plan, what was done and the verdict.
func printReap(g globals, rep reapReport) error {
	var w strings.Builder
	head := "plan"
	if rep.DryRun {
		head = "plan (a dry run: nothing was touched; --yes carries it out)"
	}
	fmt.Fprintf(&w, "%s, judging %s (%s):\n", head, rep.Judged, rep.Verdict)
	if len(rep.Plan.Actions) == 0 {
		w.WriteString("  nothing to do\n")
	}
	for _, a := range rep.Plan.Actions {
		w.WriteString("  " + safetext.Line(a.String()) + "\n")
	}
	switch {
	case rep.Evidence != nil:
		w.WriteString("evidence: " + safetext.Line(rep.Evidence.String()) + "\n")
	case !rep.DryRun && len(rep.Plan.Actions) == 0:
		w.WriteString("evidence: none: nothing was found and nothing is to be done\n")
	}
	if len(rep.Outcomes) > 0 {
		w.WriteString("done:\n")
	}
	for _, out := range rep.Outcomes {
		w.WriteString("  " + safetext.Line(out.String()) + "\n")
	}
	if a := rep.After; a != nil {
		fmt.Fprintf(&w, "after: %s\n", a.Verdict)
		for _, gpu := range a.GPUs {
			w.WriteString("  " + safetext.Line(gpu.String()) + "\n")
		}
		for _, f := range resultFindings(a.Result) {
			if f.Severity >= diff.Medium {
				w.WriteString("  " + safetext.Line(f.Severity.String()+" "+f.Kind+": "+f.Summary) + "\n")
			}
		}
	}
	_, err := io.WriteString(g.Stdout, w.String())
	return err
}

// resultFindings are r's findings, none when there is no result.
func resultFindings(r *diff.Result) []diff.Finding {
	if r == nil {
		return nil
	}
	return r.Findings
}

// appendOCSF appends to --ocsf-file each judged finding of a process acted
// on as an OCSF update, closed where its process was ended, else updated
// with what was done.
func (o reapOptions) appendOCSF(j *judgement, outcomes []reap.Outcome) error {
	if o.OCSFFile == "" {
		return nil
	}
	last := map[string]reap.Outcome{}
	var order []string
	for _, out := range outcomes {
		k := out.Action.Process.Key()
		if out.Action.Process.PID == 0 {
			continue
		}
		if _, seen := last[k]; !seen {
			order = append(order, k)
		}
		last[k] = out
	}
	var fs []ocsf.Finding
	now := time.Now()
	for _, k := range order {
		out := last[k]
		ended := (out.Result == reap.ResultDone || out.Result == reap.ResultGone) && out.Action.Step != reap.StepLeave
		msg := fmt.Sprintf("gpusnap reap: %s %s", out.Action.Step, out.Result)
		if out.Detail != "" {
			msg += ": " + out.Detail
		}
		fs = append(fs, ocsf.Followups(j.Result, ocsfSource(j.To.Host.Hostname, "reap"), k, ended, msg, now)...)
	}
	return ocsf.Append(o.OCSFFile, fs)
}

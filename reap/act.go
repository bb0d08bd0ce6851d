package reap

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Results of an action.
const (
	ResultDone    = "done"    // carried out, and it had the effect meant
	ResultGone    = "gone"    // the process had already exited, so there was nothing to do
	ResultSkipped = "skipped" // not carried out, as the process is not the one judged or is now spared
	ResultFailed  = "failed"  // tried, and it did not have the effect meant
	ResultLeft    = "left"    // a leave or name step, where nothing is done by design
)

// Outcome is what one action came to.
type Outcome struct {
	Action Action `json:"action"`
	Result string `json:"result"`
	Detail string `json:"detail,omitempty"`
}

func (o Outcome) String() string {
	s := fmt.Sprintf("%-7s %-12s %s", o.Result, o.Action.Step, o.Action.Process)
	if o.Detail != "" {
		s += ": " + o.Detail
	}
	return s
}

// Actor carries a plan out on the live host.
type Actor struct {
	// Grace is how long a process has to exit after SIGTERM before SIGKILL.
	Grace time.Duration
	// CgroupRoot is the cgroup v2 mount that plan cgroups lie under.
	CgroupRoot string
	// KeepMemory keeps target's memory outside device mappings as evidence
	// and says where and its SHA-256. A nil KeepMemory refuses the step.
	KeepMemory func(t Target) (string, error)
}

// exitWait bounds the wait for a process to exit after SIGKILL, and for a
// cgroup to report itself frozen. The kernel's part of each is quick unless
// the process sits in an uninterruptible wait.
const exitWait = 10 * time.Second

// Run carries out p's actions in order and returns one outcome each. Every
// process is reached through a pidfd opened, and checked against the
// start time judged, before the first action. A PID reused since the
// judgement is skipped, never signalled.
func (a Actor) Run(ctx context.Context, p Plan) []Outcome {
	h := newHandles()
	defer h.close()
	for _, act := range p.Actions {
		switch act.Step {
		case StepFreeze, StepTerminate, StepKeepMemory, StepKillCgroup, StepStopUnit:
			h.open(act.Process)
		case StepEndParent, StepReapParent:
			h.open(*act.Parent)
		}
	}
	out := make([]Outcome, 0, len(p.Actions))
	for _, act := range p.Actions {
		result, detail := a.do(ctx, h, act)
		out = append(out, Outcome{Action: act, Result: result, Detail: detail})
	}
	return out
}

func (a Actor) do(ctx context.Context, h *handles, act Action) (string, string) {
	switch act.Step {
	case StepLeave, StepName:
		return ResultLeft, ""
	case StepKeepMemory:
		return a.keepMemory(h, act.Process)
	case StepStopUnit:
		return a.stopUnit(ctx, act)
	case StepFreeze:
		return a.freeze(h, act)
	case StepEndParent:
		return a.terminate(ctx, h, *act.Parent, "")
	case StepTerminate:
		return a.terminate(ctx, h, act.Process, h.frozen[act.Process.Key()])
	case StepKillCgroup:
		return a.killCgroup(h, act)
	case StepReapParent:
		return reapDefunct(h, act)
	}
	return ResultSkipped, "unknown step " + act.Step
}

// ready says whether t may be acted on now, with its pidfd open and
// checked, still alive and not in D state. When not, it gives the result
// and why.
func (h *handles) ready(t Target) (fd int, result, why string) {
	fd, err := h.fd(t)
	switch {
	case errors.Is(err, errExited):
		return -1, ResultGone, "exited before the action"
	case err != nil:
		return -1, ResultSkipped, err.Error()
	case exited(fd, 0):
		return -1, ResultGone, "exited before the action"
	}
	if st, _ := readStat(t.PID); st.state == 'D' {
		return -1, ResultSkipped, "in D state now, where no signal ends it: drain the node and reboot it"
	}
	return fd, "", ""
}

func (a Actor) keepMemory(h *handles, t Target) (string, string) {
	if _, result, why := h.ready(t); result != "" {
		return result, why
	}
	if a.KeepMemory == nil {
		return ResultSkipped, "no place to keep it was given"
	}
	where, err := a.KeepMemory(t)
	if err != nil {
		return ResultFailed, err.Error()
	}
	return ResultDone, where
}

func (a Actor) stopUnit(ctx context.Context, act Action) (string, string) {
	var stopped []string
	// The timer goes first, since stopped after its unit it could start the unit again.
	for _, u := range []string{act.Timer, act.Unit} {
		if u == "" {
			continue
		}
		if err := systemctl(ctx, "stop", "--", u); err != nil {
			return ResultFailed, fmt.Sprintf("systemctl stop %s: %v", u, err)
		}
		stopped = append(stopped, u)
	}
	return ResultDone, "stopped " + strings.Join(stopped, " and ") + " (still enabled: disable it to keep it from starting at boot)"
}

// systemctl runs systemctl (the first on PATH), its output the error's
// text when it fails.
func systemctl(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "systemctl", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// freeze stops a process through the cgroup.freeze of a cgroup it is alone
// in, else by SIGSTOP through its pidfd.
func (a Actor) freeze(h *handles, act Action) (string, string) {
	fd, result, why := h.ready(act.Process)
	if result != "" {
		return result, why
	}
	if act.Cgroup != "" && a.CgroupRoot != "" {
		dir := filepath.Join(a.CgroupRoot, act.Cgroup)
		if err := freezeCgroup(dir, true); err == nil {
			h.frozen[act.Process.Key()] = dir
			return ResultDone, "cgroup " + act.Cgroup + " frozen"
		}
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGSTOP, nil, 0); err != nil {
		return ResultFailed, "SIGSTOP: " + err.Error()
	}
	h.frozen[act.Process.Key()] = "SIGSTOP"
	return ResultDone, "SIGSTOP"
}

// terminate sends t SIGTERM, lets it run again if frozen (thaw is a cgroup
// dir, or "SIGSTOP"), waits Grace, then sends SIGKILL, and waits for it to
// exit.
func (a Actor) terminate(ctx context.Context, h *handles, t Target, thaw string) (string, string) {
	fd, result, why := h.ready(t)
	if result != "" {
		return result, why
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGTERM, nil, 0); err != nil {
		return ResultFailed, "SIGTERM: " + err.Error()
	}
	switch thaw {
	case "":
	case "SIGSTOP":
		_ = unix.PidfdSendSignal(fd, unix.SIGCONT, nil, 0)
	default:
		_ = freezeCgroup(thaw, false)
	}
	if exitedCtx(ctx, fd, a.Grace) {
		return ResultDone, "exited after SIGTERM"
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return ResultFailed, "SIGKILL: " + err.Error()
	}
	if exited(fd, exitWait) {
		return ResultDone, fmt.Sprintf("killed (SIGKILL) after a grace of %s", a.Grace)
	}
	return ResultFailed, fmt.Sprintf("still alive %s after SIGKILL (state %c): drain the node", exitWait, stateOf(t.PID))
}

// killCgroup writes cgroup.kill of an escaped cgroup, once every process
// still in it is a target the plan has checked.
func (a Actor) killCgroup(h *handles, act Action) (string, string) {
	if a.CgroupRoot == "" {
		return ResultSkipped, "no cgroup v2 mount"
	}
	dir := filepath.Join(a.CgroupRoot, act.Cgroup)
	pids, err := cgroupProcs(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return ResultGone, "the cgroup is gone"
	case err != nil:
		return ResultFailed, err.Error()
	case len(pids) == 0:
		return ResultGone, "the cgroup is empty"
	}
	for _, pid := range pids {
		if !h.checked(pid) {
			return ResultSkipped, fmt.Sprintf("pid %d in it is no process the plan ends", pid)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0); err != nil {
		return ResultFailed, "cgroup.kill: " + err.Error()
	}
	if waitEmpty(dir, exitWait) {
		return ResultDone, fmt.Sprintf("cgroup.kill ended %d processes", len(pids))
	}
	return ResultFailed, "the cgroup is not empty after cgroup.kill: drain the node"
}

// reapDefunct sends SIGCHLD to a defunct process's parent, the one judged,
// and says whether it reaped it.
func reapDefunct(h *handles, act Action) (string, string) {
	fd, result, why := h.ready(*act.Parent)
	if result != "" {
		return result, "its parent " + why
	}
	if st, err := readStat(act.Process.PID); err != nil || st.start != act.Process.StartTime {
		return ResultGone, "reaped before the action"
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGCHLD, nil, 0); err != nil {
		return ResultFailed, "SIGCHLD to its parent: " + err.Error()
	}
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if st, err := readStat(act.Process.PID); err != nil || st.start != act.Process.StartTime {
			return ResultDone, "its parent reaped it"
		}
		time.Sleep(20 * time.Millisecond)
	}
	return ResultFailed, fmt.Sprintf("its parent %s does not reap it: end the parent, or drain the node and reset the GPU", act.Parent)
}

package livetest

import (
	"fmt"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/internal/testwait"
)

// WorkerOptions choose what StartWorker's worker does beside mapping its node.
type WorkerOptions struct {
	// Comm is the name the worker gives itself (kworker/0:1, as a miner does).
	Comm string
	// Port, when set, makes the worker hold an established TCP connection
	// to a listener of its own on 127.0.0.1:Port.
	Port int
	// Netns runs the worker in a network namespace of its own (unshare -n,
	// loopback brought up), where its listener and connection live.
	Netns bool
	// MoveNetns has the worker, once connected, move to a fresh network
	// namespace (unshare CLONE_NEWNET), while its sockets stay where it made
	// them.
	MoveNetns bool
	// Fork has the worker's parent lead a session of its own, as slurmstepd,
	// sshd and container runtimes do, then fork the worker without setsid and
	// exit. The worker is reparented inside its job's session. Without that
	// session, where the test runs in session 0 beside init, nothing in /proc
	// tells the worker from init's own child.
	Fork bool
	// Exe is the path the helper is copied to and run from (/dev/shm/.x/...).
	Exe string
}

// Worker is a running worker. It maps its node MAP_SHARED read-write and
// holds it open read-write and read-only. Parent is its exited parent, with
// Fork.
type Worker struct {
	Proc   Proc
	Parent Proc
}

// StartWorker builds the tenant helper (helper/tenant.c), runs it on node as
// opts say and returns once it maps the node (and, with Fork, once its
// parent has exited). Cleanup kills it by PID.
func StartWorker(t testing.TB, node string, opts WorkerOptions) Worker {
	t.Helper()
	bin := buildTenant(t)
	if opts.Exe != "" {
		bin = CopyExe(t, bin, opts.Exe)
	}
	args := []string{bin}
	if opts.Comm != "" {
		args = append(args, "-n", opts.Comm)
	}
	if opts.Port != 0 {
		args = append(args, "-c", strconv.Itoa(opts.Port))
	}
	if opts.MoveNetns {
		args = append(args, "-N")
	}
	if opts.Fork {
		args = append(args, "-g", "-s")
	}
	args = append(args, node)
	if opts.Netns {
		Require(t, "unshare", "ip")
		args = append([]string{"unshare", "-n", "sh", "-c", `ip link set lo up && exec "$0" "$@"`}, args...)
	}
	roles, worker := []string{"tenant"}, "tenant"
	if opts.Fork {
		roles, worker = append(roles, "ghost"), "ghost"
	}
	cmd := exec.Command(args[0], args[1:]...)
	if opts.Fork {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	}
	procs, exited := runTenant(t, cmd, roles...)
	w := Worker{Proc: procs[worker]}
	if opts.Fork {
		w.Parent = procs["tenant"]
	}
	t.Cleanup(func() {
		if err := w.Proc.kill(); err != nil {
			t.Errorf("livetest: worker: %v", err)
		}
		if !opts.Fork {
			<-exited // reaped, as it is our child (unshare's sh exec'd it)
		}
	})
	if opts.Fork {
		select {
		case <-exited:
		case <-time.After(waitLimit):
			t.Fatalf("livetest: worker's parent %d did not exit", w.Parent.PID)
		}
		if err := testwait.For(waitLimit, fmt.Sprintf("parent %d to exit", w.Parent.PID), func() bool { return !w.Parent.Alive() }); err != nil {
			t.Fatalf("livetest: %v", err)
		}
	}
	WaitMapped(t, w.Proc.PID, "rw-s", node)
	return w
}

package slurm_test

// The gate and the baseline, run as slurmd runs the prolog and epilog (as
// root, SLURM_JOB_ID and SLURM_JOB_GPUS in the environment; the scripts call
// no Slurm command, so no Slurm runs here), against a squatter that holds
// the job's GPU rw-s and lets go of it while gpusnap check runs, forking a
// fresh holder once the check is over; and an epilog run twice for one job.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/internal/livetest"
)

// squatter holds a node through a holder it replaces: it sees gpusnap
// check run (a wrapper of the hooks' gpusnap tells it, as a poll of /proc
// would) and lets go of the GPU until the check has exited.
type squatter struct {
	t      *testing.T
	dir    string // the wrapper's requests and the squatter's answers
	node   string
	holder livetest.Proc
	n      int // holders started
	seen   []string
}

func newSquatter(t *testing.T, dir, node string) *squatter {
	s := &squatter{t: t, dir: filepath.Join(dir, "squat"), node: node}
	must(t, os.MkdirAll(s.dir, 0o700))
	s.reopen()
	return s
}

func (s *squatter) reopen() {
	s.n++
	s.holder = livetest.HoldAt(s.t, filepath.Join(s.dir, "bin", "holder"+strconv.Itoa(s.n)), s.node)
}

// wrap writes a gpusnap that tells the squatter when a check starts and
// ends, and runs real.
func (s *squatter) wrap(real string) string {
	path := filepath.Join(s.dir, "gpusnap")
	must(s.t, os.WriteFile(path, []byte(fmt.Sprintf(`#!/bin/sh
ask() { : >"%[1]s/$1"; while [ ! -e "%[1]s/$1.done" ]; do sleep 0.01; done; rm -f "%[1]s/$1.done"; }
case " $* " in *" check "*) ask release ;; esac
%[2]s "$@"
rc=$?
case " $* " in *" check "*) ask reopen ;; esac
exit $rc
`, s.dir, real)), 0o755))
	return path
}

// run runs a hook script with env, answering the wrapper's requests, and
// returns its exit status.
func (s *squatter) run(script string, env ...string) int {
	cmd := exec.Command(script)
	cmd.Env = append(os.Environ(), env...)
	out, err := os.Create(filepath.Join(s.dir, filepath.Base(script)+".out"))
	must(s.t, err)
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	must(s.t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case err := <-done:
			if ee, ok := err.(*exec.ExitError); ok {
				return ee.ExitCode()
			}
			must(s.t, err)
			return 0
		case <-time.After(10 * time.Millisecond):
		}
		for _, req := range []string{"release", "reopen"} {
			if _, err := os.Stat(filepath.Join(s.dir, req)); err != nil {
				continue
			}
			must(s.t, os.Remove(filepath.Join(s.dir, req)))
			if req == "release" {
				s.holder.Kill(s.t)
			} else {
				s.reopen()
			}
			s.seen = append(s.seen, req)
			must(s.t, os.WriteFile(filepath.Join(s.dir, req+".done"), nil, 0o600))
		}
	}
}

func TestPrologGateIsTheBaseline(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("gate test: needs root (the hooks run as root, and the squatter maps a loop device)")
	}
	livetest.Require(t, "losetup", "gcc")
	livetest.ShareKernelLog(t)
	livetest.ShareQuietHost(t)
	livetest.OwnFakeGPUs(t)
	dir, err := os.MkdirTemp("/run", "gpusnap-gate-")
	if err != nil {
		t.Skipf("gate test: cannot make its directory under /run: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	c := &cluster{t: t, dir: dir, evDir: filepath.Join(dir, "evidence")}
	for _, d := range []string{"dev", "etc"} {
		must(t, os.MkdirAll(filepath.Join(dir, d), 0o700))
	}
	// GPU 0: a loop device's node, held by an allowed daemon (as
	// nvidia-persistenced holds one) so that, without NVML, it is seen.
	l := livetest.NewLoop(t)
	node := filepath.Join(dir, "dev", "nvidia0")
	must(t, syscall.Mknod(node, syscall.S_IFBLK|0o666, int(l.Major)<<8|int(l.Minor&0xff)|int(l.Minor&^0xff)<<12))
	livetest.HoldAt(t, filepath.Join(dir, "daemon", "holder0"), node)
	scripts := c.gpusnapBinary()
	sq := newSquatter(t, dir, node)
	real := c.gpusnap
	c.gpusnap = sq.wrap(real)
	c.syslog = newSyslogSink(t, filepath.Join(dir, "log.sock"))
	c.writeHooks(scripts)
	prolog, epilog := filepath.Join(dir, "etc", "prolog.sh"), filepath.Join(dir, "etc", "epilog.sh")

	// The prolog of a job given GPU 0: its gate is its baseline, so the
	// squatter has no check to step aside from, and the node is refused.
	if code := sq.run(prolog, "SLURM_JOB_ID=101", "SLURM_JOB_GPUS=0"); code != 1 {
		t.Fatalf("prolog with the squatter %d on GPU 0: exit %d, want 1 (seen %q)\n%s", sq.holder.PID, code, sq.seen, c.logs())
	}
	report := c.read(filepath.Join(c.evDir, "prolog-101.0.txt"))
	if !hasFinding(report, "gpu_in_use", sq.holder.PID) {
		t.Errorf("the prolog's report does not name the squatter %d:\n%s", sq.holder.PID, report)
	}
	c.syslog.expect(t, "prolog: job 101: GPUs 0 in use: gpusnap check: ", " high, ")
	// The refused job's baseline is stored all the same: its id is the last line.
	if lines := strings.Split(strings.TrimSpace(report), "\n"); len(lines[len(lines)-1]) < 8 || strings.Contains(lines[len(lines)-1], " ") {
		t.Errorf("the prolog's report does not end with the baseline's id:\n%s", report)
	}

	// A site running check and baseline apart, as two captures: the
	// squatter steps aside for the check and holds the GPU at the baseline.
	// The job's diff raises it: the job never had its GPU to itself.
	env := []string{"SLURM_JOB_ID=102", "SLURM_JOB_GPUS=0", "GPUSNAP_DB=" + filepath.Join(dir, "gpusnap.db")}
	apart := filepath.Join(dir, "etc", "apart.sh")
	must(t, os.WriteFile(apart, []byte(fmt.Sprintf("#!/bin/sh\n%[1]s check --gpus 0 --allow %[2]s && exec %[3]s baseline --tenant 102 >/dev/null\n",
		c.gpusnap, filepath.Join(dir, "etc", "allow"), real)), 0o755))
	if code := sq.run(apart, env...); code != 0 || strings.Join(sq.seen, ",") != "release,reopen" {
		t.Fatalf("check then baseline with the squatter stepping aside: exit %d, squatter %q, want 0 and release,reopen\n%s", code, sq.seen, c.read(filepath.Join(sq.dir, "apart.sh.out")))
	}
	if code := sq.run(epilog, env...); code != 1 {
		t.Fatalf("epilog of job 102 with the squatter %d on its GPU since before the job: exit %d, want 1\n%s", sq.holder.PID, code, c.logs())
	}
	report = c.read(filepath.Join(c.evDir, "job-102.0.txt"))
	if line, _ := livetest.ReportFinding(report, "gpu_in_use", sq.holder.PID); !strings.Contains(line, " at FROM") {
		t.Errorf("the epilog's report does not name the squatter %d as a use of the job's GPU at FROM:\n%s", sq.holder.PID, report)
	}

	// The epilog run again for the same job, its store now unreadable: the
	// diff exits 2, and what the first run kept is kept.
	db := filepath.Join(dir, "gpusnap.db")
	must(t, os.Rename(db, db+".aside"))
	must(t, os.Mkdir(db, 0o700))
	code := sq.run(epilog, env...)
	must(t, os.Remove(db))
	must(t, os.Rename(db+".aside", db))
	if code != 1 {
		t.Errorf("epilog of job 102 with its store unreadable: exit %d, want 1", code)
	}
	if again := c.read(filepath.Join(c.evDir, "job-102.0.txt")); again != report {
		t.Errorf("the epilog run again overwrote the first run's report:\n%s", again)
	}
	if _, err := os.Stat(filepath.Join(c.evDir, "job-102.0.tar.gz")); err != nil {
		t.Errorf("the first run's bundle: %v", err)
	}
	if second := c.read(filepath.Join(c.evDir, "job-102.0.1.txt")); !strings.Contains(second, "gpusnap.db") {
		t.Errorf("the second run's report does not say why its diff could not run:\n%s", second)
	}
	c.syslog.expect(t, "epilog: job 102: node not checked: ", "job-102.0.1.txt")
}

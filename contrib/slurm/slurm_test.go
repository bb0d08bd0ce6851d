package slurm_test

// The proof on a real Slurm (root; Debian's slurm-wlm and munge, 22.05): the
// test writes a single-node slurm.conf on loopback with its own state
// directories, the contrib prolog and epilog, and two fake GPUs (loop
// devices whose nodes are named nvidia0 and nvidia1, listed in gres.conf),
// starts munged, slurmctld and slurmd, and runs four jobs:
//   a. maps its GPU and exits: the node goes back to idle, no bundle;
//   b. forks a setsid child that keeps its GPU mapped read-write: the epilog
//      drains the node, the bundle verifies, the findings name the job and the child;
//   c. with that ghost still there, the next job's prolog refuses the node:
//      the job is requeued and does not run;
//   d. opens a GPU it was not given (and leaves a child holding it):
//      out_of_allocation_gpu_use.
// Everything it starts (daemons, ghosts, loop devices, Slurm's cgroups) it
// stops or removes, by PID or by path.

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/internal/livetest"
	"github.com/gpusnap/gpusnap/internal/testwait"
)

// waitLimit bounds each wait on Slurm: a job to end, a node to change state.
const waitLimit = 60 * time.Second

// nodeName is the test's node, distinct from the host's name so that its
// cgroup directories (slurm_<node>) are the test's alone.
const nodeName = "gpusnaptest"

type cluster struct {
	t       *testing.T
	dir     string
	env     []string // SLURM_CONF for the client commands
	gpusnap string
	tenant  string
	evDir   string
	syslog  *syslogSink
	cgroups []string // slurm_<node> directories slurmd may create
}

func TestSlurmPrologEpilog(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("Slurm test: needs root (slurmd runs the prolog and epilog as root, and jobs map loop devices)")
	}
	livetest.Require(t, "munged", "slurmctld", "slurmd", "sbatch", "scontrol", "sinfo", "scancel", "logger", "losetup", "gcc")
	livetest.ShareKernelLog(t) // the epilogs' diffs read the live kernel log
	livetest.ShareQuietHost(t) // no hopper's half-read processes beside its verdicts
	livetest.OwnFakeGPUs(t)    // its GPUs are nodes under /run
	stuck := livetest.StuckFUSE(t)
	c := startCluster(t)

	// a: maps GPU 0, which it was given, and exits (the tenant helper maps,
	// then timeout ends it): the node is idle again and nothing is kept.
	a := c.submit("a", `timeout -s KILL 2 "$TENANT" "$GPU_DIR/nvidia$SLURM_JOB_GPUS" "$OUT/a.pids"; test -s "$OUT/a.pids"`)
	if st := c.waitJob(a, "COMPLETED", "FAILED"); st != "COMPLETED" {
		t.Fatalf("job a: %s, want COMPLETED (it maps its GPU and exits)\n%s", st, c.logs())
	}
	c.waitNode("idle")
	if ev := c.evidence(a); len(ev) != 0 {
		t.Errorf("job a left evidence %q: a clean job must leave none\n%s", ev, c.syslog.text())
	}
	// Its tenant, killed with its mapping of the loop device, may take a
	// while to exit on a loaded host (its dirty pages go to the loop's
	// file). Until it has, the next jobs' verdicts rightly see it.
	tenant := c.proc("a", "tenant")
	if err := testwait.For(time.Minute, fmt.Sprintf("job a's tenant %d to exit", tenant.PID), func() bool { return !tenant.Alive() }); err != nil {
		stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", tenant.PID))
		t.Fatalf("%v: %s", err, stat)
	}

	// b: forks a setsid ghost that keeps GPU 0 mapped rw-s, and exits. Slurm
	// (proctrack/linuxproc) does not see the ghost: the epilog does.
	b := c.submit("b", `exec "$TENANT" -g "$GPU_DIR/nvidia$SLURM_JOB_GPUS" "$OUT/b.pids"`)
	c.waitJob(b, "COMPLETED", "FAILED")
	ghost := c.ghost("b")
	t.Cleanup(func() { kill(t, ghost) })
	reason := c.waitNode("drain")
	bundle := filepath.Join(c.evDir, "job-"+b+".0.tar.gz")
	if _, err := os.Stat(bundle); err != nil {
		t.Fatalf("job b: no bundle: %v (node reason %q)\n%s", err, reason, c.logs())
	}
	if out, err := exec.Command(c.gpusnap, "verify", bundle).CombinedOutput(); err != nil {
		t.Errorf("gpusnap verify %s: %v\n%s", bundle, err, out)
	}
	report := c.read(filepath.Join(c.evDir, "job-"+b+".0.txt"))
	if !strings.Contains(report, "tenant "+b) || !strings.Contains(report, fmt.Sprintf("pid %d ", ghost)) {
		t.Errorf("job b's findings name neither job %s nor the ghost %d:\n%s", b, ghost, report)
	}
	if c.cgroups != nil && !strings.Contains(report, fmt.Sprintf("pid %d (tenant, %s, user root, slurm job %s)", ghost, c.tenant, b)) {
		t.Errorf("the ghost's findings do not name job %s from its cgroup:\n%s", b, report)
	}
	// The syslog line is the diff's verdict, not a warning it printed on
	// stderr, and its lead: the ghost, a leftover of the ended job (and job
	// b as its owner where its cgroup says so). The node's drain reason is
	// the lead, the job and the report.
	lead := fmt.Sprintf("leftover_worker: pid %d (tenant), owner ", ghost)
	if c.cgroups != nil {
		lead += "slurm job " + b
	}
	c.syslog.expect(t, "epilog: job "+b+" left GPU state behind: gpusnap diff: ", " high, ", "; tenant "+b+"; from ", "; lead: ", lead, bundle)
	if !strings.HasPrefix(reason, "gpusnap: "+lead) || !strings.Contains(reason, "; job "+b+"; report "+filepath.Join(c.evDir, "job-"+b+".0.txt")) {
		t.Errorf("job b: node reason %q, want gpusnap: %s..., the job and the report", reason, lead)
	}
	t.Logf("job b: node %s, bundle %s; %s", reason, bundle, firstLine(report))

	// c: the ghost still maps GPU 0. The operator returns the node to
	// service; the next job given GPU 0 is refused by the prolog.
	c.scontrol("update", "nodename="+nodeName, "state=resume")
	c.waitNode("idle")
	cj := c.submit("c", `touch "$OUT/c.ran"`)
	reason = c.waitNode("drain")
	// Slurm requeues it held (reason launch_failed_requeued_held), through COMPLETING.
	c.poll("job "+cj+" to be requeued", func() bool {
		return c.jobField(cj, "JobState") == "PENDING" && c.jobField(cj, "Restarts") != "0"
	})
	if _, err := os.Stat(filepath.Join(c.dir, "c.ran")); err == nil {
		t.Errorf("job c ran on the node its prolog refused\n%s", c.logs())
	}
	// The lead names the ghost; its class is the check's business.
	ghostLead := fmt.Sprintf(": pid %d (tenant), owner ", ghost)
	c.syslog.expect(t, "prolog: job "+cj+": GPUs 0 in use: gpusnap check: ", " high, ", "; GPUs 0; at ", "; lead: ", ghostLead)
	if !strings.HasPrefix(reason, "gpusnap: GPUs 0 in use: ") || !strings.Contains(reason, ghostLead) || !strings.Contains(reason, "; job "+cj+" refused; report ") {
		t.Errorf("job c: node reason %q, want gpusnap: GPUs 0 in use: CLASS%s..., the job refused and the report", reason, ghostLead)
	}
	t.Logf("job c: %s (restarts %s, reason %s), did not run; node %s", c.jobField(cj, "JobState"), c.jobField(cj, "Restarts"), c.jobField(cj, "Reason"), reason)
	c.slurm("scancel", cj)
	kill(t, ghost)
	c.scontrol("update", "nodename="+nodeName, "state=resume")
	c.waitNode("idle")

	// d: given one GPU, it opens the other, and leaves a child holding it.
	d := c.submit("d", `other=1; [ "$SLURM_JOB_GPUS" = 1 ] && other=0; exec "$TENANT" -g "$GPU_DIR/nvidia$other" "$OUT/d.pids"`)
	c.waitJob(d, "COMPLETED", "FAILED")
	ghostD := c.ghost("d")
	t.Cleanup(func() { kill(t, ghostD) })
	c.waitNode("drain")
	report = c.read(filepath.Join(c.evDir, "job-"+d+".0.txt"))
	switch {
	case c.cgroups == nil:
		t.Logf("job d: out_of_allocation_gpu_use not checked: without a cgroup of the job the ghost, reparented to init, is not linked to it (report: %s)", firstLine(report))
	case !hasFinding(report, "out_of_allocation_gpu_use", ghostD):
		t.Errorf("job d: no out_of_allocation_gpu_use for its child %d:\n%s", ghostD, report)
	default:
		for _, line := range strings.Split(report, "\n") {
			if strings.Contains(line, "out_of_allocation_gpu_use:") {
				t.Logf("job d: %s", strings.TrimSpace(line))
			}
		}
	}
	kill(t, ghostD)
	c.scontrol("update", "nodename="+nodeName, "state=resume")
	c.waitNode("idle")
	anotherTenantJobs(t, c)
	reapJobs(t, c, stuck)
}

// anotherTenantJobs runs g beside h, another team's job that starts after
// g's baseline and keeps its own GPU. g's epilog finds h's process new
// since FROM: its class is another_tenant, and the syslog line and the
// drain reason name h as the owner to ask. Then, with GPUSNAP_DRAIN_REASON
// empty, i leaves a ghost: its syslog line still leads with it, and the
// node drains with Slurm's own reason alone.
func anotherTenantJobs(t *testing.T, c *cluster) {
	if c.cgroups == nil {
		t.Logf("jobs g, h: not run: without a cgroup of its job, another team's process is not told from a leftover")
	} else {
		// h starts its process only once g runs, so after g's prolog took
		// the baseline: on a loaded host Slurm may start h's script first.
		g := c.submit("g", `echo up > "$OUT/g.up"; until [ -s "$OUT/h.pids" ]; do sleep 0.1; done`)
		h := c.submit("h", `until [ -s "$OUT/g.up" ]; do sleep 0.1; done; exec "$TENANT" "$GPU_DIR/nvidia$SLURM_JOB_GPUS" "$OUT/h.pids"`)
		c.waitJob(g, "COMPLETED", "FAILED")
		reason := c.waitNode("drain")
		var pid int
		_, err := fmt.Sscanf(c.read(filepath.Join(c.dir, "h.pids")), "tenant %d", &pid)
		must(t, err)
		t.Cleanup(func() { kill(t, pid) }) // where the test ends before it cancels h
		lead := fmt.Sprintf("another_tenant: pid %d (tenant), owner slurm job %s", pid, h)
		c.syslog.expect(t, "epilog: job "+g+" left GPU state behind: gpusnap diff: ", "; lead: "+lead)
		if !strings.HasPrefix(reason, "gpusnap: "+lead+"; job "+g+"; report ") {
			t.Errorf("job g: node reason %q, want gpusnap: %s; job %s; report ...", reason, lead, g)
		}
		t.Logf("job g: node %s", reason)
		c.slurm("scancel", h)
		c.waitJob(h, "CANCELLED", "COMPLETED", "FAILED")
		c.scontrol("update", "nodename="+nodeName, "state=resume")
		c.waitNode("idle")
	}
	must(t, os.WriteFile(c.noReasonSwitch(), nil, 0o644))
	defer os.Remove(c.noReasonSwitch())
	i := c.submit("i", `exec "$TENANT" -g "$GPU_DIR/nvidia$SLURM_JOB_GPUS" "$OUT/i.pids"`)
	c.waitJob(i, "COMPLETED", "FAILED")
	ghost := c.ghost("i")
	t.Cleanup(func() { kill(t, ghost) })
	reason := c.waitNode("drain")
	c.syslog.expect(t, "epilog: job "+i+" left GPU state behind: ", "; lead: ", fmt.Sprintf(": pid %d (tenant), owner ", ghost))
	if strings.Contains(reason, "gpusnap") {
		t.Errorf("job i: node reason %q: GPUSNAP_DRAIN_REASON= must leave Slurm's own", reason)
	}
	t.Logf("job i: node %s", reason)
	kill(t, ghost)
	c.scontrol("update", "nodename="+nodeName, "state=resume")
	c.waitNode("idle")
}

// reapJobs runs the epilog with GPUSNAP_REAP=1. e: a setsid ghost keeps its
// GPU; the epilog reaps it, logs what it reaped and leaves the node up. f:
// a holder of its GPU waits in D state on a FUSE mount that never answers;
// reap refuses it, and the node drains.
func reapJobs(t *testing.T, c *cluster, stuck string) {
	must(t, os.WriteFile(c.reapSwitch(), nil, 0o644))
	e := c.submit("e", `exec "$TENANT" -g "$GPU_DIR/nvidia$SLURM_JOB_GPUS" "$OUT/e.pids"`)
	c.waitJob(e, "COMPLETED", "FAILED")
	ghost := c.ghost("e")
	t.Cleanup(func() { kill(t, ghost) })
	c.syslog.expect(t, "epilog: job "+e+": reaped "+strconv.Itoa(ghost)+"@", "node clean after")
	c.waitNode("idle")
	if runs(ghost) {
		t.Errorf("job e: the ghost %d still runs after the epilog reaped it", ghost)
	}
	report := c.read(filepath.Join(c.evDir, "job-"+e+".0.reap.txt"))
	if out, err := exec.Command(c.gpusnap, "verify", filepath.Join(c.evDir, "job-"+e+".0.reap", "bundle.tar.gz")).CombinedOutput(); err != nil {
		t.Errorf("job e: the reap's evidence does not verify: %v\n%s", err, out)
	}
	t.Logf("job e: %s", strings.ReplaceAll(report, "\n", " | "))

	f := c.submit("f", `setsid /usr/bin/python3 -c 'import mmap, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
m = mmap.mmap(fd, 65536, mmap.MAP_SHARED)
open(sys.argv[2], "w").write("stuck %d\n" % os.getpid())
open(sys.argv[3]).read()' "$GPU_DIR/nvidia$SLURM_JOB_GPUS" "$OUT/f.pids" `+stuck+` </dev/null >/dev/null 2>&1 &
until [ -s "$OUT/f.pids" ]; do sleep 0.05; done; sleep 1`)
	c.waitJob(f, "COMPLETED", "FAILED")
	var pid int
	_, err := fmt.Sscanf(c.read(filepath.Join(c.dir, "f.pids")), "stuck %d", &pid)
	must(t, err)
	t.Cleanup(func() { kill(t, pid) })
	reason := c.waitNode("drain")
	c.syslog.expect(t, "epilog: job "+f+" left GPU state that reap did not end")
	report = c.read(filepath.Join(c.evDir, "job-"+f+".0.reap.txt"))
	if !strings.Contains(report, fmt.Sprintf("leave        %d@", pid)) || !strings.Contains(report, "reboot") {
		t.Errorf("job f: the D-state holder %d is not left with drain and reboot:\n%s", pid, report)
	}
	t.Logf("job f: node %s (%s)", c.waitNode("drain"), reason)
}

// startCluster writes the configuration, starts munged, slurmctld and slurmd,
// and waits for the node to be idle. Cleanup stops them by PID.
func startCluster(t *testing.T) *cluster {
	// Outside /tmp: the live tests of other packages, which go test runs
	// meanwhile, leave ghosts of their own on nvidia0 nodes under /tmp. The
	// scripts' allow list (below) takes those out of this test's verdicts.
	dir, err := os.MkdirTemp("/run", "gpusnap-slurm-")
	if err != nil {
		t.Skipf("Slurm test: cannot make its directory under /run: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	c := &cluster{t: t, dir: dir, evDir: filepath.Join(dir, "evidence"), tenant: filepath.Join(dir, "tenant")}
	for _, d := range []string{"state", "spool", "munge", "dev", "etc"} {
		must(t, os.MkdirAll(filepath.Join(dir, d), 0o700))
	}
	// munged wants every directory above its socket searchable by all.
	must(t, os.Chmod(dir, 0o755))
	must(t, os.Chmod(filepath.Join(dir, "munge"), 0o755))
	bin, err := os.ReadFile(livetest.TenantBinary(t))
	must(t, err)
	must(t, os.WriteFile(c.tenant, bin, 0o755))
	scripts := c.gpusnapBinary()
	// Two fake GPUs: block nodes of two loop devices, named nvidia0 and
	// nvidia1, each held by a daemon of the cluster's (allowed), as
	// nvidia-persistenced holds a host's: without NVML, check sees a GPU
	// through its node's users, and a GPU it cannot see is never clean.
	for i := 0; i < 2; i++ {
		l := livetest.NewLoop(t)
		node := filepath.Join(dir, "dev", "nvidia"+strconv.Itoa(i))
		must(t, syscall.Mknod(node, syscall.S_IFBLK|0o666, int(l.Major)<<8|int(l.Minor&0xff)|int(l.Minor&^0xff)<<12))
		livetest.HoldAt(t, filepath.Join(dir, "daemon", "holder"+strconv.Itoa(i)), node)
	}
	c.syslog = newSyslogSink(t, filepath.Join(dir, "log.sock"))
	c.writeHooks(scripts)
	conf := c.writeConfig(c.taskPlugin())
	c.env = append(os.Environ(), "SLURM_CONF="+conf)
	c.startDaemons(conf)
	c.waitNode("idle")
	return c
}

// gpusnapBinary sets the gpusnap the hooks run, and returns the directory of
// the prolog and epilog scripts: the installed package's where there is
// one, else a fresh build and this directory's.
func (c *cluster) gpusnapBinary() (scripts string) {
	t := c.t
	if installed() {
		// The package's binary and scripts, as .ci/run installs them.
		c.gpusnap, scripts = "/usr/bin/gpusnap", "/usr/share/gpusnap/slurm"
	} else {
		wd, err := os.Getwd()
		must(t, err)
		c.gpusnap, scripts = filepath.Join(c.dir, "gpusnap"), wd
		gobin, err := exec.LookPath("go")
		if err != nil {
			gobin = "/usr/local/go/bin/go" // where .ci/run finds the toolchain when PATH lacks it
		}
		if out, err := exec.Command(gobin, "build", "-o", c.gpusnap, "../../cmd/gpusnap").CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
	}
	return scripts
}

// writeHooks writes the allow list and the prolog and epilog wrappers that
// run the scripts of dir scripts with this cluster's settings.
func (c *cluster) writeHooks(scripts string) {
	t, dir := c.t, c.dir
	allow := filepath.Join(dir, "etc", "allow")
	// Other packages' live tests run meanwhile: their ghosts and containers
	// (under /tmp), their jobs' binaries and the nodes a packaged program
	// maps (under /var/lib), their miner
	// (under /dev/shm) and the processes their evasive tests hide or make
	// unreadable are not this cluster's.
	must(t, os.WriteFile(allow, []byte("exe=/tmp/*\ndevice=/tmp/*\ndevice=/dev/nvidia*\nexe=/var/lib/gpusnap-*\ndevice=/var/lib/gpusnap-*\nexe=/dev/shm/*\n"+
		"kind=hidden_process\nkind=unreadable_process\n"+
		"# the cluster's daemons holding its GPUs\nexe="+dir+"/daemon/*\n"), 0o644))
	// Slurm runs a wrapper that exports the settings, as a site's own
	// wrapper does: they win over /etc/default/gpusnap, which an installed
	// package has (its GPUSNAP_DB is the host's store, not this test's).
	for _, s := range []string{"prolog.sh", "epilog.sh"} {
		must(t, os.WriteFile(filepath.Join(dir, "etc", s), []byte(fmt.Sprintf(
			"#!/bin/sh\nexport GPUSNAP=%s GPUSNAP_DB=%s GPUSNAP_EVIDENCE_DIR=%s GPUSNAP_SYSLOG_SOCKET=%s GPUSNAP_ALLOW=%s\n"+
				"[ -e %s ] && export GPUSNAP_REAP=1\n[ -e %s ] && export GPUSNAP_DRAIN_REASON=\nexec %s\n",
			c.gpusnap, filepath.Join(dir, "gpusnap.db"), c.evDir, c.syslog.path, allow, c.reapSwitch(), c.noReasonSwitch(), filepath.Join(scripts, s))), 0o755))
	}
}

// noReasonSwitch is the file whose presence makes the hooks run with
// GPUSNAP_DRAIN_REASON empty.
func (c *cluster) noReasonSwitch() string { return filepath.Join(c.dir, "etc", "noreason") }

// reapSwitch is the file whose presence makes the hooks run with
// GPUSNAP_REAP=1, as /etc/default/gpusnap would set it.
func (c *cluster) reapSwitch() string { return filepath.Join(c.dir, "etc", "reap") }

// taskPlugin returns the TaskPlugin the cluster runs, and for task/cgroup
// writes cgroup.conf and has Cleanup remove the cgroups Slurm makes.
func (c *cluster) taskPlugin() string {
	t := c.t
	// task/cgroup (cgroup v1) puts each job in a memory cgroup
	// /slurm_<node>/uid_0/job_N/...; proctrack/linuxproc kills by ancestry, so a
	// setsid child escapes it, as it does on clusters that run it. Without a v1
	// memory controller the cluster runs without cgroups.
	task := "task/none"
	if _, err := os.Stat("/sys/fs/cgroup/memory/cgroup.procs"); err == nil {
		task = "task/cgroup"
		for _, ctrl := range []string{"memory", "freezer", "cpuset", "devices"} {
			d := filepath.Join("/sys/fs/cgroup", ctrl, "slurm_"+nodeName)
			if _, err := os.Stat(d); err == nil {
				t.Skipf("Slurm test: %s exists: another run's, or a real node's: not touching it", d)
			}
			c.cgroups = append(c.cgroups, d)
		}
		must(t, os.WriteFile(filepath.Join(c.dir, "etc", "cgroup.conf"), []byte(
			"CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\nConstrainRAMSpace=yes\nConstrainDevices=no\n"), 0o644))
		t.Cleanup(c.removeCgroups)
	} else {
		t.Logf("Slurm test: no cgroup v1 memory controller here (%v): Slurm runs without cgroups, and job d is not checked", err)
	}
	return task
}

// writeConfig writes slurm.conf, for one node of two GPUs running
// TaskPlugin task, and gres.conf, and returns the path of slurm.conf.
func (c *cluster) writeConfig(task string) string {
	t, dir := c.t, c.dir
	host, err := os.Hostname()
	must(t, err)
	host, _, _ = strings.Cut(host, ".")
	conf := filepath.Join(dir, "etc", "slurm.conf")
	must(t, os.WriteFile(conf, []byte(fmt.Sprintf(`ClusterName=gpusnaptest
SlurmctldHost=%[1]s(127.0.0.1)
SlurmctldPort=%[2]d
SlurmdPort=%[3]d
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=%[4]s/munge/sock
CredType=cred/munge
StateSaveLocation=%[4]s/state
SlurmdSpoolDir=%[4]s/spool
SlurmctldPidFile=%[4]s/slurmctld.pid
SlurmdPidFile=%[4]s/slurmd.pid
SlurmctldLogFile=%[4]s/slurmctld.log
SlurmdLogFile=%[4]s/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=%[5]s
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
SlurmdParameters=config_overrides
ReturnToService=0
JobRequeue=1
PrologEpilogTimeout=60
Prolog=%[4]s/etc/prolog.sh
Epilog=%[4]s/etc/epilog.sh
GresTypes=gpu
NodeName=%[6]s NodeHostname=localhost NodeAddr=127.0.0.1 CPUs=%[7]d RealMemory=1024 Gres=gpu:2 State=UNKNOWN
PartitionName=gpu Nodes=ALL Default=YES MaxTime=10 State=UP
`, host, freePort(t), freePort(t), dir, task, nodeName, runtime.NumCPU())), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "etc", "gres.conf"), []byte(fmt.Sprintf(
		"NodeName=%s Name=gpu File=%s/dev/nvidia[0-1]\n", nodeName, dir)), 0o644))
	return conf
}

// startDaemons makes a munge key and starts munged, slurmctld and slurmd
// on configuration conf.
func (c *cluster) startDaemons(conf string) {
	t, dir := c.t, c.dir
	key := make([]byte, 1024)
	f, err := os.Open("/dev/urandom")
	must(t, err)
	_, err = f.Read(key)
	f.Close()
	must(t, err)
	must(t, os.WriteFile(filepath.Join(dir, "munge", "key"), key, 0o600))
	m := filepath.Join(dir, "munge")
	c.daemon("munged", "-F", "--socket="+m+"/sock", "--key-file="+m+"/key", "--log-file="+m+"/log",
		"--pid-file="+m+"/pid", "--seed-file="+m+"/seed")
	c.waitFile(m + "/sock")
	c.daemon("slurmctld", "-D", "-i", "-f", conf)
	c.daemon("slurmd", "-D", "-N", nodeName, "-f", conf)
}

// daemon starts a daemon in the foreground of its own process; Cleanup kills
// it by PID and reaps it.
func (c *cluster) daemon(name string, args ...string) {
	log, err := os.Create(filepath.Join(c.dir, name+".out"))
	must(c.t, err)
	cmd := exec.Command(name, args...)
	cmd.Env, cmd.Stdout, cmd.Stderr = c.env, log, log
	// Pdeathsig: a test killed before its cleanup (a timeout) takes its
	// daemons along instead of leaving them serving a removed directory.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("%s: %v", name, err)
	}
	c.t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		log.Close()
	})
}

// submit writes a job script and submits it for one GPU; it returns the job id.
func (c *cluster) submit(name, body string) string {
	script := filepath.Join(c.dir, name+".sh")
	must(c.t, os.WriteFile(script, []byte(fmt.Sprintf("#!/bin/sh\nTENANT=%s\nGPU_DIR=%s/dev\nOUT=%s\n%s\n",
		c.tenant, c.dir, c.dir, body)), 0o755))
	out := c.slurm("sbatch", "--parsable", "--gres=gpu:1", "--mem=100", "-J", name, "-o", filepath.Join(c.dir, name+".out"), script)
	id, _, _ := strings.Cut(strings.TrimSpace(out), ";")
	return id
}

func (c *cluster) slurm(name string, args ...string) string {
	c.t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = c.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		c.t.Fatalf("%s %s: %v\n%s\n%s", name, strings.Join(args, " "), err, out, c.logs())
	}
	return string(out)
}

func (c *cluster) scontrol(args ...string) { c.slurm("scontrol", args...) }

// jobField reads one field of scontrol show job, as KEY=VALUE.
func (c *cluster) jobField(id, key string) string {
	for _, f := range strings.Fields(c.slurm("scontrol", "-o", "show", "job", id)) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return ""
}

// waitJob waits for a job to reach one of the states, and returns it.
func (c *cluster) waitJob(id string, states ...string) string {
	c.t.Helper()
	var st string
	c.poll("job "+id+" to end", func() bool {
		st = c.jobField(id, "JobState")
		for _, s := range states {
			if st == s {
				return true
			}
		}
		return false
	})
	return st
}

// waitNode waits for the node's state to start with want (drain covers
// DRAINED and DRAINING) and returns its reason.
func (c *cluster) waitNode(want string) string {
	c.t.Helper()
	c.poll("node "+want, func() bool {
		st := strings.TrimSpace(c.slurm("sinfo", "-h", "-N", "-n", nodeName, "-o", "%T"))
		// Idle and responding: a job submitted to an "idle*" node waits for
		// the scheduler's next pass, a minute later.
		return st == want || (want != "idle" && strings.HasPrefix(st, want))
	})
	return strings.TrimSpace(c.slurm("sinfo", "-h", "-N", "-n", nodeName, "-o", "%E"))
}

func (c *cluster) poll(what string, done func() bool) {
	c.t.Helper()
	if err := testwait.For(waitLimit, what, done); err != nil {
		c.t.Fatalf("Slurm test: %v\n%s", err, c.logs())
	}
}

func (c *cluster) waitFile(path string) {
	c.poll(path, func() bool { _, err := os.Stat(path); return err == nil })
}

// ghost reads the PID of the ghost a job's tenant helper left, from its PID file.
func (c *cluster) ghost(job string) int { return c.proc(job, "ghost").PID }

// proc is the job's tenant or ghost, by the host PID and start time its PID
// file names.
func (c *cluster) proc(job, role string) livetest.Proc {
	c.t.Helper()
	for _, line := range strings.Split(c.read(filepath.Join(c.dir, job+".pids")), "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[0] == role {
			pid, err := strconv.Atoi(f[1])
			must(c.t, err)
			start, err := strconv.ParseUint(f[3], 10, 64)
			must(c.t, err)
			return livetest.Proc{PID: pid, StartTime: start}
		}
	}
	c.t.Fatalf("job %s: no %s in its PID file\n%s", job, role, c.logs())
	return livetest.Proc{}
}

func (c *cluster) evidence(job string) []string {
	m, _ := filepath.Glob(filepath.Join(c.evDir, "job-"+job+".*"))
	return m
}

func (c *cluster) read(path string) string {
	c.t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		c.t.Fatalf("%v\n%s", err, c.logs())
	}
	return string(data)
}

// logs is the tail of the daemons' logs and the syslog lines, for a failure.
func (c *cluster) logs() string {
	var b strings.Builder
	for _, name := range []string{"munge/log", "munged.out", "slurmctld.log", "slurmd.log", "slurmd.out", "slurmctld.out"} {
		data, _ := os.ReadFile(filepath.Join(c.dir, name))
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		lines = lines[max(0, len(lines)-15):]
		fmt.Fprintf(&b, "--- %s\n%s\n", name, strings.Join(lines, "\n"))
	}
	fmt.Fprintf(&b, "--- syslog\n%s", c.syslog.text())
	// The prologs' and epilogs' reports say what they found, and whose.
	reports, _ := filepath.Glob(filepath.Join(c.evDir, "*.txt"))
	for _, name := range reports {
		data, _ := os.ReadFile(name)
		fmt.Fprintf(&b, "\n--- %s\n%s", filepath.Base(name), data)
	}
	return b.String()
}

// removeCgroups removes the cgroup directories slurmd made for the test's
// node, deepest first, once its processes are gone.
func (c *cluster) removeCgroups() {
	for _, root := range c.cgroups {
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := os.Remove(dirs[i]); err != nil && !os.IsNotExist(err) {
				c.t.Errorf("Slurm test: removing %s: %v", dirs[i], err)
			}
		}
	}
}

// kill ends a ghost by PID, once: a second call finds it gone.
func kill(t *testing.T, pid int) {
	if pid <= 0 {
		return
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && err != syscall.ESRCH {
		t.Errorf("kill %d: %v", pid, err)
	}
	// A zombie whose parent does not reap it stays: that is no failure of
	// the test, so the wait is bounded and its end not checked.
	_ = testwait.For(2*time.Second, fmt.Sprintf("pid %d to be gone", pid), func() bool { return syscall.Kill(pid, 0) == syscall.ESRCH })
}

// syslogSink is a syslog socket of the test's own, where the contrib
// scripts' logger lines arrive.
type syslogSink struct {
	path  string
	mu    sync.Mutex
	lines []string
}

func newSyslogSink(t *testing.T, path string) *syslogSink {
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	must(t, err)
	s := &syslogSink{path: path}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 8192)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			s.mu.Lock()
			s.lines = append(s.lines, string(buf[:n]))
			s.mu.Unlock()
		}
	}()
	t.Cleanup(func() { conn.Close(); <-done })
	return s
}

func (s *syslogSink) text() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.lines, "\n")
}

// expect waits for a line holding every part: up to 30 s, which only a
// loaded host takes (the scripts have logged by the time the job's state
// shows).
func (s *syslogSink) expect(t *testing.T, parts ...string) {
	t.Helper()
	if err := testwait.For(30*time.Second, fmt.Sprintf("a syslog line with %q", parts), func() bool {
		sc := bufio.NewScanner(strings.NewReader(s.text()))
		for sc.Scan() {
			ok := true
			for _, p := range parts {
				ok = ok && strings.Contains(sc.Text(), p)
			}
			if ok {
				return true
			}
		}
		return false
	}); err != nil {
		t.Errorf("%v; got:\n%s", err, s.text())
	}
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// installed says whether the test runs the package's installed binary and
// scripts (GPUSNAP_TEST_INSTALLED=1, as .ci/run sets after installing the
// .deb) rather than a build of this tree and its contrib scripts.
func installed() bool { return os.Getenv("GPUSNAP_TEST_INSTALLED") == "1" }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// hasFinding reports whether a text report names a finding of kind about pid.
func hasFinding(report, kind string, pid int) bool {
	_, ok := livetest.ReportFinding(report, kind, pid)
	return ok
}

// runs reports whether pid is a live process: one that exited and waits
// for a parent (a subreaper) to reap it runs nothing.
func runs(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	end := strings.LastIndexByte(string(stat), ')')
	return end < 0 || end+2 >= len(stat) || stat[end+2] != 'Z'
}

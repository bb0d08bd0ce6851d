package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/capture"
	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/internal/livetest"
	"github.com/gpusnap/gpusnap/internal/testwait"
)

// A tenant given a cgroup subtree of its own (a Delegate=yes unit running as
// the user, a container with a writable cgroupfs) names cgroups there after
// another's Slurm job and pod and moves a process that maps the GPU rw-s
// into each; a second tenant is handed the very directory of a job and a pod
// at the place their managers put them. The first also names a cgroup as a
// container runtime's scope. No id read from a cgroup anyone but root could
// write is another tenant's: each process is a leftover worker to kill, not
// another tenant's to leave alone, and no slurm_job=, pod= or container=
// allow entry vouches for it.
func TestLiveOwnerNotFromADelegatedCgroup(t *testing.T) {
	livetest.Require(t, "setpriv")
	const tenant = "live-owner"
	root, loop, flags := cgroupTenant(t, tenant)
	const nobody = 65534
	podUID := "6b1f3c2a-0d4e-4f5a-8b7c-9d0e1f2a3b4c"
	job := strconv.Itoa(700000000 + int(randomUint16()))
	pod2 := "1c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f"
	container := hex.EncodeToString(randomBytes(32))
	deleg := "gpusnap-deleg-" + hex.EncodeToString(randomBytes(6)) + ".service"

	// The first tenant's subtree, as systemd delegates one: the directory
	// and its cgroup.procs are the user's.
	delegated(t, root, deleg, nobody)
	anchoredJob := "system.slice/slurmstepd.scope/job_" + job
	anchoredPod := "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + strings.ReplaceAll(pod2, "-", "_") + ".slice"
	delegated(t, root, anchoredJob, nobody)
	delegated(t, root, anchoredPod, nobody)

	jobDir, err := os.MkdirTemp("/var/lib", "gpusnap-owner-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(jobDir) })
	// Each place: the directory root hands the user, and where below it
	// the user moves its process.
	places := []struct{ top, below string }{
		{deleg, "system.slice/slurmstepd.scope/job_777/step_0/task_0"},
		{deleg, "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + strings.ReplaceAll(podUID, "-", "_") + ".slice/main"},
		{anchoredJob, "step_0"},
		{anchoredPod, "main"},
		{deleg, "docker-" + container + ".scope"},
	}
	var pids []int
	for i, place := range places {
		w := livetest.StartWorker(t, loop.Node, livetest.WorkerOptions{Exe: filepath.Join(jobDir, "python3-"+strconv.Itoa(i))})
		// Root puts the process in the delegated directory, as systemd
		// starts a unit there; the user moves it where it likes below.
		writeProcs(t, filepath.Join(root, place.top), w.Proc.PID)
		asUser(t, nobody, `mkdir -p "$1" && echo "$2" > "$1/cgroup.procs"`, filepath.Join(root, place.top, place.below), strconv.Itoa(w.Proc.PID))
		pids = append(pids, w.Proc.PID)
	}

	allow := filepath.Join(t.TempDir(), "allow.list")
	if err := os.WriteFile(allow, []byte("slurm_job=777\npod="+podUID+"\nslurm_job="+job+"\npod="+pod2+"\ncontainer="+container+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, extra := range [][]string{nil, {"--allow", allow}} {
		code, stdout, stderr := gpusnap(t, append(append([]string{"diff", "--json", "--tenant", tenant}, extra...), flags...)...)
		if code != 1 {
			t.Errorf("diff %q: exit %d, want 1: %s", extra, code, stderr)
		}
		r := decodeResult(t, stdout, stderr)
		for i, pid := range pids {
			checkOwnerDoubted(t, r, pid, places[i].below, i >= 2)
		}
	}
}

// checkOwnerDoubted checks that every finding of pid is neither allowed nor
// another tenant's, and, where the id was anchored (named), that its why
// names the user's directory.
func checkOwnerDoubted(t *testing.T, r diff.Result, pid int, place string, named bool) {
	t.Helper()
	n := 0
	for _, f := range r.Findings {
		if f.Process == nil || f.Process.PID != pid {
			continue
		}
		n++
		switch {
		case f.Severity == diff.Info || f.Allowed != "":
			t.Errorf("%s: %s allowed by %q", place, f.Kind, f.Allowed)
		case f.Triage == nil || f.Triage.Class != diff.ClassLeftoverWorker:
			t.Errorf("%s: %s triage %+v, want leftover_worker", place, f.Kind, f.Triage)
		case named && !strings.Contains(strings.Join(f.Triage.Why, "\n"), "is owned by uid 65534"):
			t.Errorf("%s: %s why %q does not name the user's directory", place, f.Kind, f.Triage.Why)
		}
	}
	if n == 0 {
		t.Errorf("%s: no finding for pid %d: %+v", place, pid, r.Findings)
	}
}

// cgroupTenant is a live test's cgroup v2 root, fake GPU and the flags of
// tenant's store, its baseline taken.
func cgroupTenant(t *testing.T, tenant string) (root string, loop *livetest.Loop, flags []string) {
	t.Helper()
	livetest.Require(t, "losetup", "gcc")
	if root = capture.CgroupV2Root(); root == "" {
		t.Skip("live /proc test: no cgroup v2 hierarchy")
	}
	return root, livetest.NewLoop(t), liveBaseline(t, tenant)
}

// delegated makes the cgroup rel below root (and what is missing above it,
// root's) and hands it to uid as systemd delegates a unit's subtree: the
// directory, cgroup.procs, cgroup.threads and cgroup.subtree_control become
// the user's. Cleanup removes, deepest first, every directory the test made.
func delegated(t *testing.T, root, rel string, uid int) {
	t.Helper()
	elems := strings.Split(rel, "/")
	for i := range elems {
		dir := filepath.Join(root, filepath.Join(elems[:i+1]...))
		err := os.Mkdir(dir, 0o755)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			t.Skipf("live /proc test: cannot create a cgroup here: %v", err)
		}
		t.Cleanup(func() { removeCgroup(t, root, dir) })
	}
	dir := filepath.Join(root, rel)
	for _, name := range []string{"", "cgroup.procs", "cgroup.threads", "cgroup.subtree_control"} {
		if err := os.Chown(filepath.Join(dir, name), uid, uid); err != nil {
			t.Fatal(err)
		}
	}
}

// removeCgroup removes dir and every cgroup below it, deepest first, once
// their processes are gone.
func removeCgroup(t *testing.T, root, dir string) {
	err := testwait.For(10*time.Second, "cgroup "+dir+" to empty", func() bool {
		var dirs []string
		_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			_ = syscall.Rmdir(dirs[i])
		}
		_, err := os.Stat(dir)
		return errors.Is(err, os.ErrNotExist)
	})
	if err != nil && strings.HasPrefix(dir, root) {
		t.Errorf("%v", err)
	}
}

func writeProcs(t *testing.T, dir string, pid int) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		t.Fatalf("move %d into %s: %v", pid, dir, err)
	}
}

// asUser runs the sh script as uid (and its group), with args as $1, $2...
func asUser(t *testing.T, uid int, script string, args ...string) {
	t.Helper()
	id := strconv.Itoa(uid)
	cmd := exec.Command("setpriv", append([]string{"--reuid=" + id, "--regid=" + id, "--clear-groups", "sh", "-c", script, "sh"}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("as uid %d: %s: %v: %s", uid, script, err, out)
	}
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on Linux
	return b
}

func randomUint16() uint16 {
	b := randomBytes(2)
	return uint16(b[0])<<8 | uint16(b[1])
}

// Another team's Slurm job (a cgroup root made, where slurmstepd puts one)
// runs a binary Bazel built in its user's cache, a hidden directory
// (~/.cache/bazel/_bazel_USER/.../bazel-out/...). Its use of the GPU is
// that job's, another tenant's, never a compromise that pages.
func TestLiveBazelBinaryOfAnotherJob(t *testing.T) {
	const tenant = "live-bazel"
	root, loop, flags := cgroupTenant(t, tenant)
	job := strconv.Itoa(700000000 + int(randomUint16()))
	rel := "system.slice/slurmstepd.scope/job_" + job + "/step_0"
	delegated(t, root, rel, 0) // root's, as slurmstepd makes it
	home, err := os.MkdirTemp("/var/lib", "gpusnap-home-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	exe := filepath.Join(home, ".cache/bazel/_bazel_ann/1f2e3d/execroot/_main/bazel-out/k8-opt/bin/server")
	w := livetest.StartWorker(t, loop.Node, livetest.WorkerOptions{Exe: exe})
	writeProcs(t, filepath.Join(root, rel), w.Proc.PID)
	code, stdout, stderr := gpusnap(t, append([]string{"diff", "--json", "--tenant", tenant}, flags...)...)
	if code == 2 {
		t.Fatalf("diff: exit 2: %s", stderr)
	}
	n := 0
	for _, f := range decodeResult(t, stdout, stderr).Findings {
		if f.Process == nil || f.Process.PID != w.Proc.PID {
			continue
		}
		n++
		if f.Triage == nil || f.Triage.Class != diff.ClassAnotherTenant || !strings.Contains(strings.Join(f.Triage.Why, "\n"), "slurm job "+job) {
			t.Errorf("%s: triage %+v, want another_tenant of slurm job %s", f.Kind, f.Triage, job)
		}
	}
	if n == 0 {
		t.Errorf("no finding for the Bazel binary %d: %s", w.Proc.PID, stdout)
	}
}

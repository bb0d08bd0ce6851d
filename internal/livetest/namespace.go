package livetest

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/internal/testwait"
)

// namespaceInit is the namespace's init. It reaps every orphan, as init
// does, so a killed leftover leaves no zombie behind.
const namespaceInit = `import os, time
while True:
    try:
        os.wait()
    except ChildProcessError:
        time.sleep(0.05)`

// Namespace is a pid and mount namespace with its own /proc, a host of its
// own for a test whose gpusnap acts on what it sees (reap --yes), so it
// sees, and can signal, no other test's processes. Mounts made before it
// are seen inside it.
type Namespace struct {
	// Init is the namespace's init as the host sees it.
	Init  Proc
	pidns string // the target of /proc/PID/ns/pid
}

// NewNamespace starts a namespace. Cleanup kills its init by PID, which
// ends every process in it.
func NewNamespace(t testing.TB) *Namespace {
	t.Helper()
	Require(t, "unshare", "nsenter", "/usr/bin/python3")
	cmd := exec.Command("unshare", "--pid", "--fork", "--mount", "--mount-proc", "--propagation", "private", "/usr/bin/python3", "-c", namespaceInit)
	if err := cmd.Start(); err != nil {
		t.Fatalf("livetest: unshare: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	n := &Namespace{}
	var child int
	err := testwait.For(waitLimit, "the namespace's init to start", func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", cmd.Process.Pid, cmd.Process.Pid))
		f := strings.Fields(string(b))
		if err != nil || len(f) != 1 {
			return false
		}
		child, _ = strconv.Atoi(f[0])
		b, err = os.ReadFile(fmt.Sprintf("/proc/%d/comm", child))
		return err == nil && strings.HasPrefix(string(b), "python3")
	})
	if err != nil {
		_ = cmd.Process.Kill()
		t.Skipf("live /proc test: no pid namespace here: %v", err)
	}
	if n.Init, err = newProc(child, 1); err == nil {
		n.pidns, err = os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", child))
	}
	t.Cleanup(func() {
		if err := n.Init.kill(); err != nil {
			t.Errorf("livetest: namespace: %v", err)
		}
		<-exited
	})
	if err != nil {
		t.Fatalf("livetest: %v", err)
	}
	return n
}

// Command runs name with args inside the namespace (nsenter), as root.
func (n *Namespace) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"-t", strconv.Itoa(n.Init.PID), "-p", "-m", "--", name}, args...)...)
}

// Proc names the process nspid of the namespace by its host PID, that of
// the process on the host whose NSpid ends in nspid, in this namespace.
func (n *Namespace) Proc(t testing.TB, nspid int) Proc {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatalf("livetest: %v", err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); err != nil || ns != n.pidns {
			continue
		}
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(status), "\n") {
			f := strings.Fields(strings.TrimPrefix(line, "NSpid:"))
			if strings.HasPrefix(line, "NSpid:") && len(f) > 1 && f[len(f)-1] == strconv.Itoa(nspid) {
				p, err := newProc(pid, nspid)
				if err != nil {
					t.Fatalf("livetest: %v", err)
				}
				return p
			}
		}
	}
	t.Fatalf("livetest: no process %d in the namespace", nspid)
	return Proc{}
}

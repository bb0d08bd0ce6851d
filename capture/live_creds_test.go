package capture_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/capture"
	"github.com/gpusnap/gpusnap/internal/livetest"
	"github.com/gpusnap/gpusnap/internal/testwait"
)

// TestLiveCredentials: the uids and NSpid of a process whose real and
// effective uids differ (setpriv), of a plain sleep and of the test itself
// are those /proc/PID/status gives, however the capture read them (the
// /proc path reads status only where its text is kept or its NSpid has
// more than the PID).
func TestLiveCredentials(t *testing.T) {
	livetest.Require(t, "setpriv")
	split := startCmd(t, "setpriv", "--ruid=65534", "--euid=65533", "--clear-groups", "sleep", "600")
	plain := startCmd(t, "sleep", "600")
	snap, err := capture.Capture(context.Background(), capture.Options{Path: capture.PathProc})
	if err != nil {
		t.Fatal(err)
	}
	for _, pid := range []int{split, plain, os.Getpid()} {
		p := capture.FindPID(t, snap, pid)
		uid, euid, nspid := statusIDs(t, pid)
		if p.UID != uid || p.EUID != euid || !slices.Equal(p.NSpid, nspid) {
			t.Errorf("pid %d: uid %d euid %d nspid %v, status says %d %d %v", pid, p.UID, p.EUID, p.NSpid, uid, euid, nspid)
		}
		if p.PIDNamespace == "" {
			t.Errorf("pid %d: no pid namespace; errors %q", pid, p.Errors)
		}
	}
	if uid, euid, _ := statusIDs(t, split); uid != 65534 || euid != 65533 {
		t.Errorf("setpriv's sleep runs as %d/%d, want 65534/65533", uid, euid)
	}
}

// startCmd starts a command that execs sleep and waits until it has (its
// uids are the sleep's from then on); it is killed, by PID, at cleanup.
func startCmd(t *testing.T, name string, args ...string) int {
	t.Helper()
	c := exec.Command(name, args...)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	testwait.Until(t, 10*time.Second, name+" to exec sleep", func() bool {
		comm, err := os.ReadFile("/proc/" + strconv.Itoa(c.Process.Pid) + "/comm")
		return err == nil && string(comm) == "sleep\n"
	})
	return c.Process.Pid
}

// statusIDs reads the real and effective uid and NSpid of pid from status.
func statusIDs(t *testing.T, pid int) (uid, euid int, nspid []int) {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range bytes.Lines(data) {
		key, val, _ := strings.Cut(strings.TrimSpace(string(line)), ":")
		if key != "Uid" && key != "NSpid" {
			continue
		}
		var ids []int
		for f := range strings.FieldsSeq(val) {
			n, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("status of %d: %q", pid, line)
			}
			ids = append(ids, n)
		}
		switch key {
		case "Uid":
			uid, euid = ids[0], ids[1]
		case "NSpid":
			nspid = ids
		}
	}
	return uid, euid, nspid
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/session"
)

// gpusnapOpens runs the CLI in-process as gpusnap does and returns its exit
// status, its stderr and how many times it opened the store.
func gpusnapOpens(t *testing.T, args ...string) (code int, stderr string, opens int) {
	t.Helper()
	ctx := session.WithTrace(context.Background(), &session.Trace{Opened: func(bool) { opens++ }})
	var out, errOut bytes.Buffer
	code = run(ctx, append([]string{"gpusnap"}, args...), &out, &errOut)
	return code, errOut.String(), opens
}

// TestCommandsOpenTheStoreOnce: each command that judges a pair or a host
// opens the store once, whatever follows the verdict (its record in the
// log, a bundle's proofs, a post snapshot stored). One diff --tenant with
// --bundle once opened it four times from two layers, and each open is
// a wait on the lock a prolog's baseline may hold.
func TestCommandsOpenTheStoreOnce(t *testing.T) {
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	dir := t.TempDir()
	before, after := scenarioEnd("cuda-ghost-keeps-context", "before"), scenarioEnd("cuda-ghost-keeps-context", "after")
	key := filepath.Join(dir, "signer")
	if code, _, stderr := gpusnap(t, "keygen", "-o", key); code != 0 {
		t.Fatalf("keygen: %s", stderr)
	}
	with := func(end []string, args ...string) []string {
		return append(append(args, "--db", db), end...)
	}
	type step struct {
		name string
		args []string
		code int
	}
	once := func(s step) {
		t.Helper()
		code, stderr, opens := gpusnapOpens(t, s.args...)
		if code != s.code {
			t.Errorf("%s: exit %d, want %d: %s", s.name, code, s.code, stderr)
		}
		if opens != 1 {
			t.Errorf("%s opened the store %d times, want once", s.name, opens)
		}
		if strings.Contains(stderr, "not in the bundle") || strings.Contains(stderr, "not recorded") {
			t.Errorf("%s: %s", s.name, stderr)
		}
	}
	for _, s := range []step{
		{"baseline", with(before, "baseline", "--tenant", "job-1"), 0},
		{"baseline --gpus (the gate)", with(before, "baseline", "--tenant", "job-1", "--gpus", "0"), exitFindings},
		{"diff --tenant --bundle", with(after, "diff", "--tenant", "job-1", "--bundle", filepath.Join(dir, "a.tar.gz"), "--sign-key", key+".key"), exitFindings},
		{"bundle --tenant", with(after, "bundle", "--tenant", "job-1", "-o", filepath.Join(dir, "b.tar.gz")), 0},
		{"check", with(after, "check", "--gpus", "0"), exitFindings},
		{"reap --tenant (a dry run)", with(after, "reap", "--tenant", "job-1"), exitFindings},
		{"store checkpoint", []string{"store", "checkpoint", "--db", db, "--sign-key", key + ".key"}, 0},
		{"store verify", []string{"store", "verify", "--db", db}, 0},
	} {
		once(s)
	}
	// Two stored snapshots, by id: the tenant's first baseline and its post.
	code, stdout, stderr := gpusnap(t, "list", "--json", "--db", db, "--tenant", "job-1")
	var listed []struct{ ID, Label string }
	if err := json.Unmarshal([]byte(stdout), &listed); code != 0 || err != nil || len(listed) < 3 {
		t.Fatalf("list: exit %d, %v: %s%s", code, err, stdout, stderr)
	}
	from, to := listed[len(listed)-1], listed[0]
	for name, args := range map[string][]string{
		"diff FROM TO --bundle": {"diff", from.ID, to.ID, "--db", db, "--bundle", filepath.Join(dir, "c.tar.gz"), "--bundle-always"},
		"bundle FROM TO":        {"bundle", from.ID, to.ID, "--db", db, "-o", filepath.Join(dir, "d.tar.gz")},
	} {
		code, stderr, opens := gpusnapOpens(t, args...)
		if code == 2 || opens != 1 {
			t.Errorf("%s: exit %d, opened the store %d times, want once: %s", name, code, opens, stderr)
		}
	}
	// The store's own commands reach it through session.Host too, and open
	// it once: rm once for all its ids, events once for the tenant's window
	// (of an event log that watch made and left empty).
	j, err := eventlog.OpenJournal(eventlog.JournalDir(db))
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	for _, s := range []step{
		{"list", []string{"list", "--db", db}, 0},
		{"show", []string{"show", to.ID, "--db", db}, 0},
		{"show --json", []string{"show", "--json", to.ID, "--db", db}, 0},
		{"events --tenant", []string{"events", "--tenant", "job-1", "--db", db}, 0},
		{"store check", []string{"store", "check", "--db", db}, 0},
		{"prune --dry-run", []string{"prune", "--keep-last", "100", "--dry-run", "--db", db}, 0},
		{"prune", []string{"prune", "--keep-last", "100", "--db", db}, 0},
		{"rm", []string{"rm", "--force", from.ID, to.ID, "--db", db}, 0},
	} {
		once(s)
	}
}

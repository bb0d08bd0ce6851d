package session

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/internal/livetest"
	"github.com/gpusnap/gpusnap/snapshot"
	"github.com/gpusnap/gpusnap/store"
)

const ghost = "cuda-ghost-keeps-context" // a scenario whose after end holds a ghost

// TestPostWithoutStoreCreatesNothing: with no store there is no baseline:
// the error comes before the capture, and no store is created.
func TestPostWithoutStoreCreatesNothing(t *testing.T) {
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	f := newFixture(t, db, ghost)
	_, err := f.host.Post(context.Background(), "job-1")
	if !errors.Is(err, store.ErrNoBaseline) {
		t.Errorf("post without a store: %v, want ErrNoBaseline", err)
	}
	wantIn(t, "post without a store", err, "no store at "+db)
	if _, serr := os.Stat(db); f.captures != 0 || !errors.Is(serr, fs.ErrNotExist) {
		t.Errorf("%d captures, store %v: want none, and no store", f.captures, serr)
	}
}

// TestHasBaseline: no store is an error, not a no; then no until the
// tenant's baseline is stored, another tenant's not counting.
func TestHasBaseline(t *testing.T) {
	f := newFixture(t, filepath.Join(t.TempDir(), "gpusnap.db"), ghost)
	if ok, err := f.host.HasBaseline("job-1"); ok || err == nil {
		t.Errorf("no store: %v, %v; want an error", ok, err)
	}
	f.baseline(t, "job-other")
	if ok, err := f.host.HasBaseline("job-1"); ok || err != nil {
		t.Errorf("another tenant's baseline: %v, %v; want no", ok, err)
	}
	f.baseline(t, "job-1")
	if ok, err := f.host.HasBaseline("job-1"); !ok || err != nil {
		t.Errorf("the tenant's baseline: %v, %v; want yes", ok, err)
	}
}

// TestPostWithoutBaselineStoresNothing: a store without the tenant's
// baseline is an error, and the capture taken is not stored as a post.
func TestPostWithoutBaselineStoresNothing(t *testing.T) {
	f := newFixture(t, filepath.Join(t.TempDir(), "gpusnap.db"), ghost)
	f.baseline(t, "job-other")
	f.side = "after"
	if _, err := f.host.Post(context.Background(), "job-1"); !errors.Is(err, store.ErrNoBaseline) {
		t.Errorf("post without a baseline: %v, want ErrNoBaseline", err)
	}
	if n := f.count(t, "", snapshot.LabelPost); n != 0 {
		t.Errorf("%d post snapshots stored, want none", n)
	}
}

// TestPostStoresAndDiffs: the post snapshot is stored, paired with the
// newest baseline, and its diff finds the ghost.
func TestPostStoresAndDiffs(t *testing.T) {
	f := newFixture(t, filepath.Join(t.TempDir(), "gpusnap.db"), ghost)
	f.baseline(t, "job-1")
	base := f.baseline(t, "job-1")
	p := f.post(t, "job-1")
	if p.From.ID != base.ID || p.To.Label != snapshot.LabelPost || f.count(t, "job-1", snapshot.LabelPost) != 1 {
		t.Fatalf("pair %s..%s (%s), want the newest baseline %s and one stored post", p.From.ID, p.To.ID, p.To.Label, base.ID)
	}
	wantGhost(t, f, p)
}

// wantGhost diffs p and wants the scenario's ghost found at medium or above.
func wantGhost(t *testing.T, f *fixture, p Pair) {
	t.Helper()
	r, err := f.host.Compare(p, &diff.Options{ZombieThreshold: diff.DefaultZombieThreshold})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Failed(diff.Medium) || !slices.ContainsFunc(r.Findings, func(f diff.Finding) bool {
		return f.Kind == diff.KindLeftoverDeviceMapping && f.Process != nil && f.Process.PID == 670
	}) {
		t.Errorf("diff of %s..%s: %+v, want the ghost 670's leftover mapping", p.From.ID, p.To.ID, r.Summary)
	}
}

// TestPostReadOnlyStoreStillDiffs: a store on a filesystem remounted
// read-only between baseline and post still gives the baseline to judge
// by: the pair comes back with StoreErr set, and the diff finds the ghost.
func TestPostReadOnlyStoreStillDiffs(t *testing.T) {
	livetest.Require(t, "mount", "umount")
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=32m,mode=0755", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount a tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	f := newFixture(t, filepath.Join(dir, "gpusnap.db"), ghost)
	base := f.baseline(t, "job-1")
	if out, err := exec.Command("mount", "-o", "remount,ro", dir).CombinedOutput(); err != nil {
		t.Fatalf("remount read-only: %v: %s", err, out)
	}
	f.side = "after"
	p, err := f.host.Post(context.Background(), "job-1")
	if err != nil {
		t.Fatalf("post on a read-only store: %v", err)
	}
	wantIn(t, "StoreErr", p.StoreErr, "post snapshot "+p.To.ID+" not stored", "read-only file system")
	if p.From.ID != base.ID || f.count(t, "job-1", snapshot.LabelPost) != 0 {
		t.Errorf("pair from %s, want the baseline %s, and no post stored", p.From.ID, base.ID)
	}
	wantGhost(t, f, p)
}

// TestLatestPicksNewestPostAfterBaseline: a bundle's pair is the newest
// baseline and the newest post of the tenant taken after it; with none
// after it (a post before, another tenant's after), one is captured and
// stored.
func TestLatestPicksNewestPostAfterBaseline(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, filepath.Join(t.TempDir(), "gpusnap.db"), ghost)
	first := f.baseline(t, "job-1")
	f.post(t, "job-1")
	newest := f.post(t, "job-1").To
	captures := f.captures
	p, err := f.host.Latest(ctx, "job-1")
	if err != nil {
		t.Fatal(err)
	}
	if p.From.ID != first.ID || p.To.ID != newest.ID || f.captures != captures {
		t.Fatalf("Latest: %s..%s after %d captures; want %s..%s and no capture", p.From.ID, p.To.ID, f.captures-captures, first.ID, newest.ID)
	}

	second := f.baseline(t, "job-1")
	f.baseline(t, "job-2")
	f.post(t, "job-2")
	f.side = "after"
	p, err = f.host.Latest(ctx, "job-1")
	if err != nil {
		t.Fatal(err)
	}
	if p.StoreErr != nil || p.From.ID != second.ID || p.To.ID == newest.ID || p.To.Tenant != "job-1" || p.To.Label != snapshot.LabelPost {
		t.Fatalf("Latest with no post after the baseline: %v, %s..%s (%s, %s)", p.StoreErr, p.From.ID, p.To.ID, p.To.Tenant, p.To.Label)
	}
	again, err := f.host.Latest(ctx, "job-1")
	if err != nil {
		t.Fatal(err)
	}
	if again.To.ID != p.To.ID {
		t.Errorf("Latest again: %s; want the post it stored, %s", again.To.ID, p.To.ID)
	}
	wantGhost(t, f, again)
	f.noWarnings(t)
}

// TestStored: two ids load two stored snapshots and capture nothing; one
// id is diffed against a capture of its tenant that is not stored.
func TestStored(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, filepath.Join(t.TempDir(), "gpusnap.db"), ghost)
	base := f.baseline(t, "job-1")
	post := f.post(t, "job-1").To
	captures := f.captures
	p, err := f.host.Stored(ctx, base.ID, post.ID)
	if err != nil {
		t.Fatalf("Stored FROM TO: %v", err)
	}
	if p.From.ID != base.ID || p.To.ID != post.ID || f.captures != captures {
		t.Fatalf("Stored FROM TO: %s..%s, %d captures", p.From.ID, p.To.ID, f.captures-captures)
	}
	p, err = f.host.Stored(ctx, base.ID, "")
	if err != nil {
		t.Fatalf("Stored FROM: %v", err)
	}
	if p.To.Tenant != "job-1" || p.To.Label != snapshot.LabelSnapshot || f.captures != captures+1 {
		t.Fatalf("Stored FROM: to %s (%s, %s) after %d captures", p.To.ID, p.To.Tenant, p.To.Label, f.captures-captures)
	}
	if n := f.count(t, "", ""); n != 2 {
		t.Errorf("the store holds %d snapshots, want the 2 stored before", n)
	}
	wantGhost(t, f, p)
}

// TestWindowWithoutEventLog: where no watch ever recorded, the window is
// no source and one problem naming the missing log, with nothing on stderr.
func TestWindowWithoutEventLog(t *testing.T) {
	f := newFixture(t, filepath.Join(t.TempDir(), "gpusnap.db"), ghost)
	to := f.baseline(t, "job-1")
	src, problems := f.host.Window(to.Host.CaptureStart, to)
	if src != nil || len(problems) != 1 || problems[0].Kind != eventlog.ProblemNoLog {
		t.Errorf("window: %v, %+v; want no source and one no-log problem", src, problems)
	}
	f.noWarnings(t)
}

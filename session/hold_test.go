package session

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/snapshot"
	"github.com/gpusnap/gpusnap/store"
)

// traced counts the fixture's opens of the store, read-only or not, and
// makes each capture prove that no lock is held over it: a capture opens
// the store read-write itself, with a short wait, and keeps the error.
func traced(t *testing.T, f *fixture, db string) (opens *[]bool, lockedOverCapture *error) {
	t.Helper()
	opens, lockedOverCapture = new([]bool), new(error)
	f.host.Trace = &Trace{Opened: func(readOnly bool) { *opens = append(*opens, readOnly) }}
	capture := f.host.Capture
	f.host.Capture = func(ctx context.Context, label, tenant string) (*snapshot.Snapshot, error) {
		st, err := store.Open(db, store.Options{LockTimeout: 50 * time.Millisecond})
		if err == nil {
			err = st.Close()
		}
		if err != nil && *lockedOverCapture == nil {
			*lockedOverCapture = err
		}
		return capture(ctx, label, tenant)
	}
	return opens, lockedOverCapture
}

// TestHoldOpensOnce: in a hold that writes, a tenant diff's post, history,
// record and bundle proofs are one open of the store, read-write, and the
// bundle is written after the hold with nothing more opened. Without a
// hold each step opens on its own. A hold open before a capture is let go
// for it, and no capture runs under a lock. A read-only hold asked to record opens
// again read-write.
func TestHoldOpensOnce(t *testing.T) {
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	f := newFixture(t, db, ghost)
	f.baseline(t, "job-1")
	opens, locked := traced(t, f, db)
	h := f.host

	judge := func() {
		t.Helper()
		f.side = "after"
		p, err := h.Post(ctx, "job-1")
		if err != nil || p.StoreErr != nil {
			t.Fatalf("post: %v, %v", err, p.StoreErr)
		}
		var opts diff.Options
		r, err := h.Compare(p, &opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Record("diff", r, opts.Events, p.From.ID, p.To.ID); err != nil || r.StoreLog == nil {
			t.Fatalf("record: %v, head %v", err, r.StoreLog)
		}
		b := Bundle{Path: filepath.Join(t.TempDir(), "b.tar.gz")}
		h.Prove(&b, p.From, p.To)
		if err := h.Release(); err != nil {
			t.Fatal(err)
		}
		n := len(*opens)
		w, err := h.WriteBundle(ctx, b, p.From, p.To, r, opts)
		if err != nil || !w.StoreProved || len(*opens) != n {
			t.Fatalf("bundle after the hold: %v, store proved %v, %d opens more", err, w.StoreProved, len(*opens)-n)
		}
	}

	h.Hold(true)
	judge()
	if len(*opens) != 1 || (*opens)[0] {
		t.Errorf("in a hold that writes: opens (read-only?) %v, want one read-write", *opens)
	}
	*opens = nil
	judge()
	if len(*opens) != 4 {
		t.Errorf("without a hold: %d opens, want 4 (post, history, record, proofs)", len(*opens))
	}
	// A hold opened before a post is let go for its capture.
	*opens = nil
	h.Hold(true)
	if _, err := h.HasBaseline("job-1"); err != nil {
		t.Fatal(err)
	}
	judge()
	if len(*opens) != 2 {
		t.Errorf("a hold opened before the post: %d opens, want 2", len(*opens))
	}

	*opens = nil
	h.Hold(false)
	if _, err := h.HasBaseline("job-1"); err != nil {
		t.Fatal(err)
	}
	r := &diff.Result{Findings: []diff.Finding{}}
	if err := h.Record("check", r, nil); err != nil {
		t.Fatal(err)
	}
	if err := h.Release(); err != nil {
		t.Fatal(err)
	}
	if len(*opens) != 2 || !(*opens)[0] || (*opens)[1] {
		t.Errorf("a read-only hold that records: opens (read-only?) %v, want read-only then read-write", *opens)
	}
	if *locked != nil {
		t.Errorf("a capture ran while the store was locked: %v", *locked)
	}
	f.noWarnings(t)
}

// TestLatestCapturesOutsideTheHold: a bundle's pair with no post stored
// yet drops the hold's read-only open before capturing the post, then
// stores it in an open of its own.
func TestLatestCapturesOutsideTheHold(t *testing.T) {
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	f := newFixture(t, db, ghost)
	f.baseline(t, "job-1")
	opens, locked := traced(t, f, db)
	f.host.Hold(false)
	f.side = "after"
	p, err := f.host.Latest(context.Background(), "job-1")
	if rerr := f.host.Release(); err == nil {
		err = rerr
	}
	if err != nil || p.StoreErr != nil || p.To.Label != snapshot.LabelPost {
		t.Fatalf("Latest: %v, %v", err, p.StoreErr)
	}
	if *locked != nil {
		t.Errorf("the post was captured under the hold's lock: %v", *locked)
	}
	if len(*opens) != 2 || !(*opens)[0] || (*opens)[1] {
		t.Errorf("opens (read-only?) %v, want read-only, then read-write after the capture", *opens)
	}
}

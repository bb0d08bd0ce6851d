package eventlog

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestWaitReachedAndFirstStart: a real journal. The log reaches an instant
// once a record at or after it is written; a log whose last record is a
// stop is not waited on; before, the wait ends with an unflushed problem.
// A watch's request file moves, and FlushRequests sees it once. The first
// watch start at or after an instant is its segment's first record.
func TestWaitReachedAndFirstStart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db.events")
	j, err := OpenJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	asked := j.WatchFlushRequests()
	start := Event{Time: time.Now(), Kind: KindWatchStart, Mode: "tracepoint"}
	if _, err := j.Append([]Event{start}); err != nil {
		t.Fatal(err)
	}
	to := time.Now().Add(time.Millisecond)
	p := WaitReached(dir, to, 100*time.Millisecond)
	if p == nil || p.Kind != ProblemUnflushed {
		t.Fatalf("no record after TO: %+v", p)
	}
	if !asked.Asked() || asked.Asked() {
		t.Error("the request is seen once")
	}
	if _, err := j.Append([]Event{{Time: to.Add(time.Millisecond), Kind: KindAlive}}); err != nil {
		t.Fatal(err)
	}
	if p := WaitReached(dir, to, 100*time.Millisecond); p != nil {
		t.Errorf("a heartbeat after TO: %+v", p)
	}
	later := time.Now().Add(time.Hour)
	if _, err := j.Append([]Event{{Time: time.Now(), Kind: KindWatchStop}}); err != nil {
		t.Fatal(err)
	}
	// A minute's wait that ends in seconds at most: not waited on, however
	// loaded the host.
	began := time.Now()
	if p := WaitReached(dir, later, time.Minute); p != nil || time.Since(began) > 20*time.Second {
		t.Errorf("a stopped watch is not waited on: %+v after %s", p, time.Since(began))
	}
	if at, ok := FirstWatchStart(dir, start.Time.Add(-time.Minute)); !ok || !at.Equal(start.Time) {
		t.Errorf("first start %v %v, want %v", at, ok, start.Time)
	}
	if _, ok := FirstWatchStart(dir, later); ok {
		t.Error("a start after the last segment")
	}
	if fi, err := os.Lstat(filepath.Join(dir, flushRequestName)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("request file: %v %v", fi, err)
	}
}

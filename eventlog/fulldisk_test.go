package eventlog

import (
	"bytes"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/internal/livetest"
)

// TestJournalFullDisk appends to a log on a real tmpfs that is full: the
// write is short, then ENOSPC. The segment must be cut back to the last
// whole record (no torn line), Append must say how many records are in, and
// once space is freed the rest go in with the seq and chain they would have
// had: every event is there once, whole, and the chain holds.
func TestJournalFullDisk(t *testing.T) {
	mnt := livetest.SmallTmpfs(t, 256<<10)
	dir := JournalDir(mnt + "/gpusnap.db")
	j, err := OpenJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if _, err := j.Append([]Event{{Time: at(0), Kind: KindWatchStart, Mode: "tracepoint"}}); err != nil {
		t.Fatal(err)
	}
	filler := livetest.FillDisk(t, mnt)
	var batch []Event
	for i := range 200 { // ~30 KB: past what the segment's last page has left
		batch = append(batch, Event{Time: at(1).Add(time.Duration(i) * time.Millisecond), Kind: KindOpen, Access: "rw",
			Process: &Process{PID: 1000 + i, StartTime: 7, Comm: "transient"}})
	}
	n, err := j.Append(batch)
	if !errors.Is(err, syscall.ENOSPC) || n >= len(batch) {
		t.Fatalf("append on a full disk: %d of %d in, %v", n, len(batch), err)
	}
	data, _ := os.ReadFile(j.seg.Name())
	if len(data) == 0 || data[len(data)-1] != '\n' || int64(len(data)) != j.size {
		t.Fatalf("the segment ends with a torn record (%d bytes, journal says %d)", len(data), j.size)
	}
	t.Logf("full disk: %d of %d records went in, the segment cut back to %d bytes", n, len(batch), len(data))
	// Still full: nothing more goes in, and nothing is torn.
	if k, err := j.Append(batch[n:]); err == nil || k != 0 {
		t.Fatalf("a second append on a full disk: %d, %v", k, err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if k, err := j.Append(batch[n:]); err != nil || k != len(batch)-n {
		t.Fatalf("after freeing the disk: %d, %v", k, err)
	}
	r, err := ReadEvents(dir, time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Damaged != 0 || r.Broken != 0 || len(r.Events) != 1+len(batch) {
		t.Fatalf("read back: %d events, damaged %d, broken %d: %v", len(r.Events), r.Damaged, r.Broken, r.Faults)
	}
	for i, e := range r.Events[1:] {
		if e.Process.PID != 1000+i || e.Seq != uint64(i+2) {
			t.Fatalf("record %d: pid %d seq %d", i, e.Process.PID, e.Seq)
		}
	}
	if bytes.Count(data, []byte("\n")) != n+1 {
		t.Errorf("the cut segment held %d lines, want %d", bytes.Count(data, []byte("\n")), n+1)
	}
}

package eventlog

import (
	"os"
	"testing"
	"time"
)

// TestWindowReadOnce: a window of a few events is read from disk once, by
// OpenWindow: its walks still hand every event after the log is gone. One
// of more than maxHeld events is read from disk at each walk: once the log
// is gone, a walk finds none.
func TestWindowReadOnce(t *testing.T) {
	for _, n := range []int{10, maxHeld + 10} {
		dir, _ := writeLog(t, n)
		w, err := OpenWindow(dir, time.Time{}, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		count := func() int {
			k := 0
			if err := w.Each(func(*Event) bool { k++; return true }); err != nil {
				t.Fatal(err)
			}
			return k
		}
		if k := count(); k != n {
			t.Fatalf("%d events: walked %d", n, k)
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		k := count()
		switch {
		case n <= maxHeld && k != n:
			t.Errorf("a window of %d events read from disk again: %d after the log was removed", n, k)
		case n > maxHeld && k != 0:
			t.Errorf("a window of %d events (over %d) was held: %d after the log was removed", n, maxHeld, k)
		}
	}
}

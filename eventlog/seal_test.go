package eventlog

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCheckHeadsAfterTheFact: a read's heads (where the segment's chain
// stood) hold while the log is only appended to, and no longer hold once
// the segment is edited, cut back, rewritten whole with a chain of its own
// (a record dropped, the rest re-sealed as a watch would), or removed.
func TestCheckHeadsAfterTheFact(t *testing.T) {
	cases := []struct {
		name string
		// tamper changes the log in dir (its one segment seg).
		tamper func(t *testing.T, dir, seg string)
		want   string // in the error; "" for none
	}{
		{"untouched", func(*testing.T, string, string) {}, ""},
		{"appended to", func(t *testing.T, dir, _ string) {
			j, err := OpenJournal(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer j.Close()
			if _, err := j.Append([]Event{{Time: at(20), Kind: KindAlive}}); err != nil {
				t.Fatal(err)
			}
		}, ""},
		{"a byte edited", func(t *testing.T, _, seg string) {
			editLines(t, seg, func(l [][]byte) [][]byte { l[3] = bytes.Replace(l[3], []byte(`"rw"`), []byte(`"r"`), 1); return l })
		}, "changed at or before line 10"},
		{"cut back", func(t *testing.T, _, seg string) {
			editLines(t, seg, func(l [][]byte) [][]byte { return l[:6] })
		}, "holds 6 lines"},
		{"rewritten whole, one record dropped and one added", func(t *testing.T, dir, seg string) {
			r, err := ReadEvents(dir, time.Time{}, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(seg); err != nil {
				t.Fatal(err)
			}
			start, ok := SegmentStart(filepath.Base(seg))
			j := &Journal{dir: dir}
			if err := j.rotate(start); !ok || err != nil {
				t.Fatal(ok, err)
			}
			defer j.Close()
			events := append(append(r.Events[:4:4], r.Events[5:]...), Event{Time: at(9), Kind: KindAlive})
			if _, err := j.Append(events); err != nil {
				t.Fatal(err)
			}
		}, "sealed as seq 10"},
		{"removed", func(t *testing.T, _, seg string) {
			if err := os.Remove(seg); err != nil {
				t.Fatal(err)
			}
		}, ErrSegmentGone.Error()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir, seg := writeLog(t, 10)
			r, err := ReadEvents(dir, time.Time{}, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Heads) != 1 || r.Heads[0].Segment != filepath.Base(seg) || r.Heads[0].Line != 10 || r.Heads[0].Seq != 10 || len(r.Heads[0].Hash) != 64 {
				t.Fatalf("heads of a segment of 10 records: %+v", r.Heads)
			}
			// A second head earlier in the same segment, as an earlier diff sealed it.
			early := r.Heads[0]
			early.Line, early.Seq = 3, 3
			early.Hash = hashOfLine(t, seg, 3)
			heads := []Head{r.Heads[0], early}
			if errs := CheckHeads(dir, heads); errs[0] != nil || errs[1] != nil {
				t.Fatalf("before tampering: %v", errs)
			}
			tc.tamper(t, dir, seg)
			errs := CheckHeads(dir, heads)
			switch {
			case tc.want == "" && (errs[0] != nil || errs[1] != nil):
				t.Errorf("heads no longer hold: %v", errs)
			case tc.want != "" && (errs[0] == nil || !strings.Contains(errs[0].Error(), tc.want)):
				t.Errorf("head at line 10: %v, want %q", errs[0], tc.want)
			case tc.name == "removed" && !errors.Is(errs[0], ErrSegmentGone):
				t.Errorf("a removed segment: %v", errs[0])
			}
			t.Logf("line 10: %v; line 3: %v", errs[0], errs[1])
		})
	}
}

// TestHeadsBounded: a read through more segments than it seals keeps the
// heads of the last of them, in order.
func TestHeadsBounded(t *testing.T) {
	dir := JournalDir(filepath.Join(t.TempDir(), "gpusnap.db"))
	for i := range maxHeads + 3 {
		j := &Journal{dir: dir}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := j.rotate(at(i)); err != nil {
			t.Fatal(err)
		}
		if _, err := j.Append([]Event{{Time: at(i), Kind: KindWatchStart}}); err != nil {
			t.Fatal(err)
		}
		j.Close()
	}
	r, err := ReadEvents(dir, time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	segs, _ := segments(dir)
	if len(r.Heads) != maxHeads || r.Heads[0].Segment != filepath.Base(segs[3].path) || r.Heads[maxHeads-1].Segment != filepath.Base(segs[len(segs)-1].path) {
		t.Fatalf("%d heads, first %+v", len(r.Heads), r.Heads[0])
	}
}

// hashOfLine is the hash a chained line of seg states, line from 1.
func hashOfLine(t *testing.T, seg string, line int) string {
	t.Helper()
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	l := bytes.Split(data, []byte("\n"))[line-1]
	_, _, ok := splitHash(l)
	if !ok {
		t.Fatalf("line %d is not chained: %s", line, l)
	}
	return string(l[len(l)-hashTail+len(hashField) : len(l)-2])
}

package store

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/gpusnap/gpusnap/snapshot"
	"github.com/gpusnap/gpusnap/store/tlog"
)

// putN stores n snapshots of a few processes, a second apart from start,
// every fifth a baseline of tenant "t", and returns their ids.
func putN(t testing.TB, s *Store, start time.Time, n int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		label := snapshot.LabelSnapshot
		if i%5 == 0 {
			label = snapshot.LabelBaseline
		}
		snap := fakeSnapshot(start.Add(time.Duration(i)*time.Second), label, "t", 3+i%4)
		snap.Processes[0].PID += i // a record of its own besides the shared ones
		if err := s.Put(snap); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, snap.ID)
	}
	return ids
}

func mustVerify(t *testing.T, s *Store, cp *tlog.TreeHead) *LogReport {
	t.Helper()
	rep, err := s.VerifyLog(cp)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestLogVerifiesAfterAppendsAndPrunes: 1,000 snapshots stored, with
// removes, prunes and results between them, verify clean, and consistent
// with every checkpoint taken on the way.
func TestLogVerifiesAfterAppendsAndPrunes(t *testing.T) {
	s, _ := openTemp(t)
	s.db.NoSync = true // a test of the log, not of the disk
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var heads []tlog.TreeHead
	for round := range 20 {
		ids := putN(t, s, start.Add(time.Duration(round)*time.Hour), 50)
		if _, err := s.Remove(ids[1], false); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AppendResult("diff", strings.Repeat("ab", 32), nil, ids[0], ids[2]); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Prune(Prune{KeepLast: 30, Now: start}); err != nil {
			t.Fatal(err)
		}
		head, err := s.Head()
		if err != nil {
			t.Fatal(err)
		}
		heads = append(heads, head)
	}
	for _, h := range heads {
		rep := mustVerify(t, s, &h)
		if len(rep.Problems) > 0 {
			t.Fatalf("consistent with the checkpoint of size %d: %+v", h.Size, rep.Problems)
		}
	}
	rep := mustVerify(t, s, nil)
	if want := 20*50 + 20 + 20 + 20; rep.Head.Size != uint64(want) {
		t.Errorf("log of %d leaves, want %d", rep.Head.Size, want)
	}
	if rep.Snapshots != 30 || !bytes.Equal(rep.Head.Root, heads[len(heads)-1].Root) {
		t.Errorf("%d snapshots (want 30), root %x (head %x)", rep.Snapshots, rep.Head.Root, heads[len(heads)-1].Root)
	}
	metas, _ := s.List(Filter{})
	proofs, err := s.Inclusion(metas[0].ID, metas[len(metas)-1].ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range proofs {
		if err := p.Verify(); err != nil {
			t.Error(err)
		}
		p.Hashes[0][0] ^= 1
		if p.Verify() == nil {
			t.Error("a proof with a flipped byte verifies")
		}
	}
}

// TestLogAdoptsAnOlderStore: a store written before the log began gets one
// adopt leaf per snapshot at its next write, and then verifies.
func TestLogAdoptsAnOlderStore(t *testing.T) {
	s, _ := openTemp(t)
	ids := putN(t, s, time.Now(), 3)
	if err := s.update(func(tx *bolt.Tx) error {
		if err := tx.DeleteBucket(bucketLog); err != nil {
			return err
		}
		info := tx.Bucket(bucketInfo)
		_ = info.Delete(keyLogTree)
		return info.Delete(keyLogOrigin)
	}); err != nil {
		t.Fatal(err)
	}
	if rep := mustVerify(t, s, nil); len(rep.Problems) != 3 {
		t.Errorf("an older store's snapshots are not in a log: want 3 problems, got %+v", rep.Problems)
	}
	putN(t, s, time.Now().Add(time.Hour), 1)
	rep := mustVerify(t, s, nil)
	if len(rep.Problems) > 0 || rep.Head.Size != 4 {
		t.Fatalf("after adoption: size %d, %+v", rep.Head.Size, rep.Problems)
	}
	proofs, err := s.Inclusion(ids[0])
	if err != nil || proofs[0].Verify() != nil || !strings.Contains(proofs[0].Leaf, "op adopt") {
		t.Errorf("adopted snapshot's proof: %v %+v", err, proofs)
	}
}

// tamper edits the store file with bbolt directly, as root on the host could.
func tamper(t *testing.T, path string, fn func(tx *bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(fn); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestLogNamesTampering: each edit made outside gpusnap is named by the
// leaf and snapshot it touches.
func TestLogNamesTampering(t *testing.T) {
	cases := []struct {
		name string
		edit func(tx *bolt.Tx, ids []string) error
		// leaf and snapshot the problem must name (ids index; -1 none), and a
		// word of its detail.
		leaf, snap int
		word       string
	}{
		{"process record changed", func(tx *bolt.Tx, ids []string) error {
			b := tx.Bucket(bucketProcs)
			k, v := b.Cursor().Last() // the newest snapshot's own record
			v = bytes.Replace(bytes.Clone(v), []byte("sleep"), []byte("sleeq"), 1)
			return b.Put(bytes.Clone(k), v)
		}, 3, 3, "changed"},
		{"record and its hash changed together", func(tx *bolt.Tx, ids []string) error {
			b := tx.Bucket(bucketMeta)
			v := bytes.Replace(bytes.Clone(b.Get([]byte(ids[2]))), []byte(`"t"`), []byte(`"u"`), 1)
			return b.Put([]byte(ids[2]), v)
		}, 2, 2, "digest"},
		{"snapshot's keys deleted", func(tx *bolt.Tx, ids []string) error {
			for _, name := range [][]byte{bucketMeta, bucketSnapshots, bucketRefs} {
				if err := tx.Bucket(name).Delete([]byte(ids[1])); err != nil {
					return err
				}
			}
			return nil
		}, 1, 1, "gone"},
		{"baseline index entry deleted", func(tx *bolt.Tx, ids []string) error {
			return tx.Bucket(bucketBaselines).Delete(baselineKey("t", ids[0]))
		}, 0, 0, "baseline index"},
		{"leaves reordered", func(tx *bolt.Tx, ids []string) error {
			b := tx.Bucket(bucketLog)
			a, c := bytes.Clone(b.Get(seqKey(1))), bytes.Clone(b.Get(seqKey(2)))
			if err := b.Put(seqKey(1), c); err != nil {
				return err
			}
			return b.Put(seqKey(2), a)
		}, 1, 2, "reordered"},
		{"snapshot added outside gpusnap", func(tx *bolt.Tx, ids []string) error {
			forged := []byte(ids[3] + "x")
			for _, name := range [][]byte{bucketMeta, bucketSnapshots, bucketRefs} {
				if err := tx.Bucket(name).Put(forged, bytes.Clone(tx.Bucket(name).Get([]byte(ids[3])))); err != nil {
					return err
				}
			}
			return nil
		}, -1, -2, "no leaf stores it"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, path := openTemp(t)
			ids := putN(t, s, time.Now(), 4)
			_ = s.Close()
			tamper(t, path, func(tx *bolt.Tx) error { return c.edit(tx, ids) })
			s, err := Open(path, Options{ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			rep := mustVerify(t, s, nil)
			wantID := ""
			switch {
			case c.snap >= 0:
				wantID = ids[c.snap]
			case c.snap == -2:
				wantID = ids[3] + "x"
			}
			for _, p := range rep.Problems {
				if p.Leaf == int64(c.leaf) && p.Snapshot == wantID && strings.Contains(p.Detail, c.word) {
					return
				}
			}
			t.Errorf("want a problem at leaf %d naming %q (%q), got %+v", c.leaf, wantID, c.word, rep.Problems)
		})
	}
}

// TestLogCutBackToAnEarlierCopy: the file replaced by a copy taken before
// later snapshots verifies alone (it is a sound older store) but not
// against a checkpoint taken after them.
func TestLogCutBackToAnEarlierCopy(t *testing.T) {
	s, path := openTemp(t)
	putN(t, s, time.Now(), 3)
	_ = s.Close()
	old, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	putN(t, s, time.Now().Add(time.Hour), 2)
	cp, err := s.Head()
	_ = s.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, old, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if rep := mustVerify(t, s, nil); len(rep.Problems) != 0 {
		t.Fatalf("an older copy is sound on its own: %+v", rep.Problems)
	}
	rep := mustVerify(t, s, &cp)
	if len(rep.Problems) != 1 || rep.Problems[0].Leaf != 3 || !strings.Contains(rep.Problems[0].Detail, "cut back") {
		t.Errorf("want the cut named at leaf 3, got %+v", rep.Problems)
	}
	// Same size, other leaves: a store replaced, not extended.
	other, _ := openTemp(t)
	putN(t, other, time.Now().Add(2*time.Hour), 5)
	head, _ := other.Head()
	cp.Origin = head.Origin
	if rep := mustVerify(t, other, &cp); len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0].Detail, "do not hash") {
		t.Errorf("a replaced log: %+v", rep.Problems)
	}
}

func TestCheckpointSignedNote(t *testing.T) {
	s, _ := openTemp(t)
	putN(t, s, time.Now(), 2)
	head, err := s.Head()
	if err != nil {
		t.Fatal(err)
	}
	// Many keys: half of them have a '+' in their base64, as a note key's
	// separator is.
	for range 32 {
		_, priv, _ := ed25519.GenerateKey(rand.Reader)
		if _, err := tlog.SignCheckpoint(head, priv); err != nil {
			t.Fatalf("key %x: %v", priv.Public(), err)
		}
	}
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	note, err := tlog.SignCheckpoint(head, priv)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(note), "\n")
	if lines[0] != head.Origin || lines[1] != "2" || lines[3] != "" || !strings.HasPrefix(lines[4], "— "+head.Origin+" ") {
		t.Fatalf("not a C2SP checkpoint:\n%s", note)
	}
	got, ok, err := tlog.ParseCheckpoint(note, pub)
	if err != nil || !ok || got.Size != 2 || !bytes.Equal(got.Root, head.Root) {
		t.Fatalf("%+v %v %v", got, ok, err)
	}
	other, _, _ := ed25519.GenerateKey(rand.Reader)
	if _, _, err := tlog.ParseCheckpoint(note, other); !errors.Is(err, tlog.ErrCheckpointSignature) {
		t.Errorf("another key: %v", err)
	}
	edited := bytes.Replace(note, []byte("\n2\n"), []byte("\n1\n"), 1)
	if _, _, err := tlog.ParseCheckpoint(edited, pub); !errors.Is(err, tlog.ErrCheckpointSignature) {
		t.Errorf("an edited size: %v", err)
	}
	if _, ok, err := tlog.ParseCheckpoint(edited, nil); err != nil || ok {
		t.Errorf("without a key it is read, not verified: %v %v", ok, err)
	}
}

// BenchmarkLogAppend appends one result leaf to a log of 10,000 leaves: a
// write transaction, without its fsync (the disk's cost, not the log's).
func BenchmarkLogAppend(b *testing.B) {
	s := logOf(b, 10_000)
	for b.Loop() {
		if _, err := s.AppendResult("check", strings.Repeat("0", 64), nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifyLog10000 verifies a log of 10,000 leaves: 8,000 snapshots
// stored, 2,000 removed by prunes and removes along the way.
func BenchmarkVerifyLog10000(b *testing.B) {
	s := logOf(b, 10_000)
	for b.Loop() {
		rep, err := s.VerifyLog(nil)
		if err != nil || len(rep.Problems) > 0 || rep.Head.Size != 10_000 {
			b.Fatal(err, rep.Problems)
		}
	}
}

// logOf is a store whose log has n leaves, most of them puts.
func logOf(b *testing.B, n int) *Store {
	s, err := Open(filepath.Join(b.TempDir(), "gpusnap.db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	s.db.NoSync = true
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for size := 0; size < n; {
		ids := putN(b, s, start.Add(time.Duration(size)*time.Second), min(9, n-size))
		size += len(ids)
		if size < n {
			if _, err := s.Remove(ids[0], true); err != nil {
				b.Fatal(err)
			}
			size++
		}
	}
	return s
}

// TestDigestIsTheLeafs: a snapshot's Digest, and that of its JSON read
// back (as a bundle's before.json is), is the digest its put leaf records.
func TestDigestIsTheLeafs(t *testing.T) {
	s, _ := openTemp(t)
	snap := fakeSnapshot(time.Now(), snapshot.LabelBaseline, "t", 60)
	snap.Processes[3].Comm = "x\ufffdy" // what capture makes of a byte that is not UTF-8
	snap.Processes[0].Raw.Maps += "\xff\xfe raw bytes\n"
	if err := s.Put(snap); err != nil {
		t.Fatal(err)
	}
	proofs, err := s.Inclusion(snap.ID)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := tlog.ParseLeaf([]byte(proofs[0].Leaf))
	if err != nil {
		t.Fatal(err)
	}
	b, err := compactJSON(s, snap.ID)
	if err != nil {
		t.Fatal(err)
	}
	var back snapshot.Snapshot
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]*snapshot.Snapshot{"stored": snap, "read back": &back} {
		if d, err := tlog.Digest(v); err != nil || d != leaf.Snapshots[0].Digest {
			t.Errorf("%s: digest %s (%v), the leaf's %s", name, d, err, leaf.Snapshots[0].Digest)
		}
	}
	back.Processes[5].Comm = "edited"
	if d, _ := tlog.Digest(&back); d == leaf.Snapshots[0].Digest {
		t.Error("an edited snapshot has its leaf's digest")
	}
}

// TestResultLeafSealsEvents: a result leaf's event log seals are part of
// its text (and so of the tree), read back exactly, and reported by
// VerifyLog with the leaf that holds them; a seal line that is not one is
// refused, as is one not in canonical form.
func TestResultLeafSealsEvents(t *testing.T) {
	s, _ := openTemp(t)
	seals := []tlog.EventSeal{
		{Segment: "20261201T120000.000000000Z.jsonl", Line: 12, Seq: 40, Hash: strings.Repeat("ab", 32)},
		{Segment: "20261201T130000.000000000Z.jsonl", Line: 3, Seq: 41, Hash: strings.Repeat("cd", 32)},
	}
	without, err := s.AppendResult("check", strings.Repeat("0", 64), nil)
	if err != nil {
		t.Fatal(err)
	}
	with, err := s.AppendResult("check", strings.Repeat("0", 64), seals)
	if err != nil {
		t.Fatal(err)
	}
	rep := mustVerify(t, s, &with)
	if len(rep.Problems) > 0 || len(rep.Seals) != 2 || rep.Seals[0].Leaf != without.Size || rep.Seals[1].EventSeal != seals[1] {
		t.Fatalf("problems %+v, seals %+v", rep.Problems, rep.Seals)
	}
	l := tlog.Leaf{Index: 1, Op: tlog.OpResult, Command: "check", Findings: strings.Repeat("0", 64), Events: seals}
	back, err := tlog.ParseLeaf(l.Marshal())
	if err != nil || len(back.Events) != 2 || back.Events[0] != seals[0] {
		t.Fatalf("read back: %+v %v", back, err)
	}
	text := string(l.Marshal())
	for _, bad := range []string{
		strings.Replace(text, " 12 40 ", " 12 ", 1),
		strings.Replace(text, " 12 40 ", " x 40 ", 1),
		strings.Replace(text, `"20261201T120000.000000000Z.jsonl"`, "20261201T120000.000000000Z.jsonl", 1),
		strings.Replace(text, " 12 40 ", " 012 40 ", 1),
	} {
		if _, err := tlog.ParseLeaf([]byte(bad)); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

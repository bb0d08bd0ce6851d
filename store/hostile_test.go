package store

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/gpusnap/gpusnap/snapshot"
)

// craft changes a closed store's raw records with bbolt directly, as a
// stranger handing over a store could.
func craft(t *testing.T, path string, fn func(tx *bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(fn); err != nil {
		t.Fatal(err)
	}
}

// storeOf writes snaps into a new store and closes it.
func storeOf(t *testing.T, snaps ...*snapshot.Snapshot) string {
	t.Helper()
	s, path := openTemp(t)
	for _, snap := range snaps {
		if err := s.Put(snap); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func reopen(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(path, Options{LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// wantDamaged checks err is a damage report holding want, and came in time
// (generous: the race detector slows inflating twentyfold on a loaded host).
func wantDamaged(t *testing.T, err error, want string, took time.Duration) {
	t.Helper()
	var d *DamagedError
	if !errors.As(err, &d) || !strings.Contains(d.Cause, want) {
		t.Fatalf("err %v, want damage %q", err, want)
	}
	if took > time.Minute {
		t.Errorf("took %s to find the damage", took)
	}
}

// TestRecordListedAMillionTimes: a crafted snapshot listing one record
// 1,000,000 times is damage, found before anything is decoded.
func TestRecordListedAMillionTimes(t *testing.T) {
	snap := fakeSnapshot(time.Now(), snapshot.LabelSnapshot, "", 3)
	path := storeOf(t, snap)
	craft(t, path, func(tx *bolt.Tx) error {
		seqs := make([]uint64, 1_000_000)
		for i := range seqs {
			seqs[i] = 1
		}
		return tx.Bucket(bucketRefs).Put([]byte(snap.ID), encodeRefs(seqs, false))
	})
	s := reopen(t, path)
	for name, op := range map[string]func() error{
		"get":   func() error { _, err := s.Get(snap.ID); return err },
		"json":  func() error { _, err := compactJSON(s, snap.ID); return err },
		"check": func() error { r, err := s.Check(); return checkErr(r, err) },
	} {
		start := time.Now()
		err := op()
		t.Run(name, func(t *testing.T) { wantDamaged(t, err, "listed twice", time.Since(start)) })
	}
}

// checkErr turns a check's problems into a damage error, for wantDamaged.
func checkErr(r CheckResult, err error) error {
	if err != nil || len(r.Problems) == 0 {
		return err
	}
	return &DamagedError{Cause: strings.Join(r.Problems, "; ")}
}

// TestHeaderCompressionBomb: a header that inflates to 17 MiB (a bomb of
// gigabytes is stopped at the same point) is damage, found after at most
// 16 MiB inflated.
func TestHeaderCompressionBomb(t *testing.T) {
	snap := fakeSnapshot(time.Now(), snapshot.LabelSnapshot, "", 1)
	path := storeOf(t, snap)
	bomb := compress(nil, make([]byte, 17<<20))
	craft(t, path, func(tx *bolt.Tx) error { return tx.Bucket(bucketSnapshots).Put([]byte(snap.ID), bomb) })
	start := time.Now()
	_, err := reopen(t, path).Get(snap.ID)
	wantDamaged(t, err, "compression bomb", time.Since(start))
}

// TestHeaderNotJSON: a header that inflates to what is not JSON is damage
// to GetJSON, which show --json indents without a validating scan.
func TestHeaderNotJSON(t *testing.T) {
	snap := fakeSnapshot(time.Now(), snapshot.LabelSnapshot, "", 1)
	path := storeOf(t, snap)
	broken := compress(nil, []byte(`{"id":"x","processes":null,"host":{"name":"`))
	craft(t, path, func(tx *bolt.Tx) error { return tx.Bucket(bucketSnapshots).Put([]byte(snap.ID), broken) })
	start := time.Now()
	_, err := compactJSON(reopen(t, path), snap.ID)
	wantDamaged(t, err, "header is not JSON", time.Since(start))
}

// TestCorruptRecordNotReused: a record that no longer matches its hash
// is not reused by the next snapshot of the same processes: the store is
// damaged, said, and nothing is written.
func TestCorruptRecordNotReused(t *testing.T) {
	first := fakeSnapshot(time.Now(), snapshot.LabelSnapshot, "", 3)
	path := storeOf(t, first)
	craft(t, path, func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketProcs)
		v := bytes.Clone(b.Get(seqKey(2)))
		v[len(v)-3] ^= 1 // inside the record: still its hash in front
		return b.Put(seqKey(2), v)
	})
	s := reopen(t, path)
	again := *first
	again.ID = snapshot.NewID(time.Now().Add(time.Second))
	wantDamaged(t, s.Put(&again), "process record 2 does not match its hash", 0)
	if _, err := s.Get(again.ID); err == nil {
		t.Error("a snapshot was written into a damaged store")
	}
	r, err := s.Check()
	if err != nil || !strings.Contains(strings.Join(r.Problems, "\n"), "process record 2 does not match its hash") {
		t.Errorf("store check: %v %q", err, r.Problems)
	}
}

// TestDanglingBaselineNotTakenForLatest: a baseline index entry naming no
// snapshot makes prune refuse, instead of removing the real latest baseline.
func TestDanglingBaselineNotTakenForLatest(t *testing.T) {
	t0 := time.Now().Add(-time.Hour)
	old := fakeSnapshot(t0, snapshot.LabelBaseline, "job-1", 1)
	latest := fakeSnapshot(t0.Add(time.Minute), snapshot.LabelBaseline, "job-1", 1)
	path := storeOf(t, old, latest)
	craft(t, path, func(tx *bolt.Tx) error {
		return tx.Bucket(bucketBaselines).Put(baselineKey("job-1", snapshot.NewID(time.Now())), nil)
	})
	s := reopen(t, path)
	_, err := s.Prune(Prune{KeepLast: 1, Filter: Filter{Tenant: "job-1"}})
	wantDamaged(t, err, "baseline index names missing snapshot", 0)
	if _, err := s.Get(latest.ID); err != nil {
		t.Errorf("the latest baseline is gone: %v", err)
	}
}

// TestTenantProcessStoreCost: the process a tenant makes as large as it can
// (100,000 mappings of one device and 5.5 MB of arguments, as capture keeps
// them: 256 mappings and a run, 64 KiB of each text) adds at most 64 KiB to
// the store, and reads back whole.
func TestTenantProcessStoreCost(t *testing.T) {
	snap := fakeSnapshot(time.Now(), snapshot.LabelSnapshot, "", 1)
	p := &snap.Processes[0]
	minor := 0
	var maps strings.Builder
	for i := range snapshot.MappingsPerDevice {
		start := uint64(0x7f0000000000 + 2*i*0x1000)
		addr := fmt.Sprintf("%x-%x", start, start+0x1000)
		p.Mappings = append(p.Mappings, snapshot.Mapping{Address: addr, Start: start, End: start + 0x1000, Size: 0x1000,
			Perms: "r--s", Dev: "00:06", Inode: 1043, Path: "/dev/nvidia0", DeviceNumber: snapshot.DeviceNumber{Major: 195, Minor: 0}, DeviceType: "char",
			Class: snapshot.ClassNVIDIA, GPUMinor: &minor})
	}
	for i := 0; maps.Len() < snapshot.TextLimit; i++ {
		start := 0x7f0000000000 + 2*i*0x1000
		fmt.Fprintf(&maps, "%x-%x r--s 00000000 00:06 1043                       /dev/nvidia0\n", start, start+0x1000)
	}
	p.MappingRuns = []snapshot.MappingRun{{Path: "/dev/nvidia0", Class: snapshot.ClassNVIDIA, GPUMinor: &minor,
		Lines: 100000 - snapshot.MappingsPerDevice, Bytes: (100000 - snapshot.MappingsPerDevice) * 0x1000, Perms: []string{"r--s"}}}
	// Arguments as random as text gets: base64 of random bytes.
	random := make([]byte, snapshot.CmdlineLimit*3/4)
	rand.Read(random)
	args := base64.StdEncoding.EncodeToString(random)
	p.Cmdline = []string{args[:snapshot.CmdlineLimit/2], args[snapshot.CmdlineLimit/2:]}
	cut := &snapshot.Cut{Length: 5_500_000, SHA256: strings.Repeat("ab", 32)}
	p.CmdlineCut = cut
	p.Raw = &snapshot.Raw{Maps: maps.String()[:snapshot.TextLimit], Cmdline: strings.Join(p.Cmdline, "\x00"),
		Cuts: map[string]snapshot.Cut{"cmdline": *cut, "maps": *cut}}
	j, _ := json.Marshal(p)
	path := storeOf(t, snap)
	var stored int
	craft(t, path, func(tx *bolt.Tx) error { stored = len(tx.Bucket(bucketProcs).Get(seqKey(1))); return nil })
	t.Logf("process record: %d bytes of JSON, %d stored", len(j), stored)
	if stored > 64<<10 {
		t.Errorf("the tenant's process costs %d bytes of store, more than 64 KiB", stored)
	}
	got, err := reopen(t, path).Get(snap.ID)
	if err != nil {
		t.Fatal(err)
	}
	if g, _ := json.Marshal(&got.Processes[0]); !bytes.Equal(g, j) {
		t.Error("the compressed record does not read back as it was")
	}
}

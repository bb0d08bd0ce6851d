package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/gpusnap/gpusnap/snapshot"
)

// fakeSnapshot is a host of n processes, like a capture of it at t.
func fakeSnapshot(t time.Time, label, tenant string, n int) *snapshot.Snapshot {
	s := &snapshot.Snapshot{
		ID: snapshot.NewID(t), Label: label, Tenant: tenant,
		Host: snapshot.Host{Hostname: "gpu-node-7", KernelRelease: "6.8.0", BootID: "b00t", BootTime: time.Unix(1700000000, 0).UTC(),
			CaptureStart: t, CaptureEnd: t.Add(40 * time.Millisecond), GpusnapVersion: "test", ProcRoot: "/proc"},
		Scan: snapshot.Scan{ProcessesRead: n, Refused: 1, RefusedPIDs: []int{1}},
		NVML: snapshot.NVML{Source: "disabled", Unavailable: "--no-nvml", Missing: map[string]string{"b": "x", "a": "y"}},
	}
	s.Processes = []snapshot.Process{}
	for i := range n {
		minor := 0
		p := snapshot.Process{
			PID: 1000 + i, StartTime: uint64(5000 + i), Started: time.Unix(1700000050, 0).UTC(), PPID: 1, Comm: "sleep",
			Cmdline: []string{"sleep", "infinity"}, Exe: "/usr/bin/sleep", User: "alice", UID: 1000, EUID: 1000,
			Cgroups: []string{"0::/user.slice/user-1000.slice/session-3.scope"}, SystemdUnit: "session-3.scope",
		}
		if i%50 == 0 {
			p.Comm, p.Exe = "python3", "/tmp/.x/miner"
			p.Mappings = []snapshot.Mapping{{Address: "7f00-7f10", Start: 0x7f00, End: 0x7f10, Size: 16, Perms: "rw-s", Dev: "00:06", Inode: 3, Path: "/dev/nvidia0", Class: snapshot.ClassNVIDIA, GPUMinor: &minor}}
			p.Holders = []snapshot.Holder{{FD: 3, Target: "/dev/nvidia0", Access: "rw", Class: snapshot.ClassNVIDIA}}
			p.Raw = &snapshot.Raw{Maps: "7f00-7f10 rw-s 00000000 00:06 3 /dev/nvidia0\n"}
		}
		s.Processes = append(s.Processes, p)
	}
	return s
}

func openTemp(t *testing.T) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state", "gpusnap.db")
	s, err := Open(path, Options{LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, path
}

func indentJSON(t *testing.T, s *snapshot.Snapshot) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(s); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestPutGetIsByteIdentical(t *testing.T) {
	s, path := openTemp(t)
	now := time.Now() // local zone and monotonic clock, as a capture has
	empty := fakeSnapshot(now.Add(time.Second), snapshot.LabelSnapshot, "", 0)
	empty.Processes = nil // JSON null must stay null, not become []
	for _, snap := range []*snapshot.Snapshot{fakeSnapshot(now, snapshot.LabelSnapshot, "", 120), empty} {
		if err := s.Put(snap); err != nil {
			t.Fatal(err)
		}
		got, err := s.Get(snap.ID)
		if err != nil {
			t.Fatal(err)
		}
		if want, have := indentJSON(t, snap), indentJSON(t, got); !bytes.Equal(want, have) {
			t.Fatalf("stored snapshot differs:\nwant %s\nhave %s", want, have)
		}
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("store file mode %04o, want 0600", fi.Mode().Perm())
	}
	di, _ := os.Stat(filepath.Dir(path))
	if di.Mode().Perm() != 0o700 {
		t.Errorf("store directory mode %04o, want 0700", di.Mode().Perm())
	}
}

func TestDeduplicatesUnchangedProcesses(t *testing.T) {
	s, _ := openTemp(t)
	t0 := time.Now()
	first := fakeSnapshot(t0, snapshot.LabelSnapshot, "", 500)
	if err := s.Put(first); err != nil {
		t.Fatal(err)
	}
	second := fakeSnapshot(t0.Add(time.Second), snapshot.LabelSnapshot, "", 500)
	second.Processes[7].Comm = "changed" // one process changed, one new
	second.Processes = append(second.Processes, snapshot.Process{PID: 99999, StartTime: 1, Comm: "gpusnap"})
	if err := s.Put(second); err != nil {
		t.Fatal(err)
	}
	r, err := s.Check()
	if err != nil || len(r.Problems) > 0 {
		t.Fatalf("check: %v %v", err, r.Problems)
	}
	if r.Processes != 502 {
		t.Errorf("%d process records, want 502 (500, then one changed and one new)", r.Processes)
	}
	// Removing the first frees the one record only it used.
	if _, err := s.Remove(first.ID, false); err != nil {
		t.Fatal(err)
	}
	if r, _ = s.Check(); r.Processes != 501 || len(r.Problems) > 0 {
		t.Errorf("after rm: %d process records (want 501), problems %v", r.Processes, r.Problems)
	}
	got, err := s.Get(second.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(indentJSON(t, got), indentJSON(t, second)) {
		t.Error("the remaining snapshot changed when another was removed")
	}
	if _, err := s.Remove(second.ID, false); err != nil {
		t.Fatal(err)
	}
	if r, _ = s.Check(); r.Processes != 0 || r.Snapshots != 0 {
		t.Errorf("empty store keeps %d process records, %d snapshots", r.Processes, r.Snapshots)
	}
}

func TestPrefixLookup(t *testing.T) {
	s, _ := openTemp(t)
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	a := fakeSnapshot(t0, snapshot.LabelSnapshot, "", 1)
	b := fakeSnapshot(t0.Add(time.Hour), snapshot.LabelSnapshot, "", 1)
	for _, snap := range []*snapshot.Snapshot{a, b} {
		if err := s.Put(snap); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := s.Get(a.ID[:12]); err != nil || got.ID != a.ID {
		t.Errorf("unique prefix: %v %v", got, err)
	}
	if _, err := s.Get("20260301-1"); !errors.Is(err, ErrAmbiguous) || !strings.Contains(err.Error(), a.ID) {
		t.Errorf("ambiguous prefix: %v", err)
	}
	if _, err := s.Get("1999"); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown id: %v", err)
	}
	if _, err := s.Get(""); !errors.Is(err, ErrNotFound) {
		t.Errorf("empty id: %v", err)
	}
	if err := s.Put(a); !errors.Is(err, ErrExists) {
		t.Errorf("second put of one id: %v", err)
	}
}

func TestLatestBaselineAndList(t *testing.T) {
	s, _ := openTemp(t)
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	var all []*snapshot.Snapshot
	add := func(min int, label, tenant string) *snapshot.Snapshot {
		snap := fakeSnapshot(t0.Add(time.Duration(min)*time.Minute), label, tenant, 2)
		if err := s.Put(snap); err != nil {
			t.Fatal(err)
		}
		all = append(all, snap)
		return snap
	}
	add(0, snapshot.LabelBaseline, "job-1")
	b1 := add(1, snapshot.LabelBaseline, "job-1")
	b2 := add(2, snapshot.LabelBaseline, "job-10") // a tenant whose name extends another's
	add(3, snapshot.LabelPost, "job-1")
	add(4, snapshot.LabelSnapshot, "")
	add(5, snapshot.LabelBaseline, "job-0")

	for tenant, want := range map[string]string{"job-1": b1.ID, "job-10": b2.ID} {
		got, err := s.LatestBaseline(tenant)
		if err != nil || got.ID != want {
			t.Errorf("LatestBaseline(%s) = %v, %v; want %s", tenant, got, err, want)
		}
	}
	for _, tenant := range []string{"job", "job-2", "", "zzz"} {
		if _, err := s.LatestBaseline(tenant); !errors.Is(err, ErrNoBaseline) {
			t.Errorf("LatestBaseline(%q): %v, want ErrNoBaseline", tenant, err)
		}
	}

	ids := func(ms []Meta) string {
		var out []string
		for _, m := range ms {
			out = append(out, m.ID[len("20260301-10"):len("20260301-1004")])
		}
		return strings.Join(out, " ")
	}
	for _, tc := range []struct {
		f    Filter
		want string
	}{
		{Filter{}, "05 04 03 02 01 00"},
		{Filter{Tenant: "job-1"}, "03 01 00"},
		{Filter{Label: snapshot.LabelBaseline}, "05 02 01 00"},
		{Filter{Since: t0.Add(3 * time.Minute)}, "05 04 03"},
	} {
		got, err := s.List(tc.f)
		if err != nil || ids(got) != tc.want {
			t.Errorf("List(%+v) = %q, %v; want %q", tc.f, ids(got), err, tc.want)
		}
	}
	ms, _ := s.List(Filter{Tenant: "job-10"})
	if len(ms) != 1 || ms[0].Host != "gpu-node-7" || !ms[0].Time.Equal(t0.Add(2*time.Minute)) || ms[0].Label != snapshot.LabelBaseline {
		t.Errorf("meta: %+v", ms)
	}

	// The latest baseline is protected; the one before it is not.
	if _, err := s.Remove(b1.ID, false); !errors.Is(err, ErrProtected) {
		t.Errorf("rm of latest baseline: %v", err)
	}
	if _, err := s.Remove(all[0].ID, false); err != nil {
		t.Errorf("rm of older baseline: %v", err)
	}
	if _, err := s.Remove(b1.ID, true); err != nil {
		t.Fatal(err)
	}
	if _, err := s.LatestBaseline("job-1"); !errors.Is(err, ErrNoBaseline) {
		t.Errorf("after removing job-1's baselines: %v", err)
	}
}

func TestPrune(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	setup := func(t *testing.T) *Store {
		s, _ := openTemp(t)
		// minutes 0..5: a baseline of job-1 at 0, snapshots after.
		for i := range 6 {
			label, tenant := snapshot.LabelSnapshot, ""
			if i == 0 {
				label, tenant = snapshot.LabelBaseline, "job-1"
			}
			if err := s.Put(fakeSnapshot(t0.Add(time.Duration(i)*time.Minute), label, tenant, 20+i)); err != nil {
				t.Fatal(err)
			}
		}
		return s
	}
	now := t0.Add(10 * time.Minute)
	for _, tc := range []struct {
		name string
		p    Prune
		want int // removed
	}{
		{"keep-last", Prune{KeepLast: 2}, 3}, // 4 snapshots older than the last 2, less the baseline
		{"keep-last-force", Prune{KeepLast: 2, Force: true}, 4},
		{"older-than", Prune{OlderThan: 7 * time.Minute}, 2}, // minutes 0..2 are older; 0 is protected
		{"both-keep", Prune{KeepLast: 5, OlderThan: 7 * time.Minute}, 0},
		{"filter", Prune{KeepLast: 1, Filter: Filter{Label: snapshot.LabelSnapshot}}, 4},
		{"dry-run", Prune{KeepLast: 1, DryRun: true}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := setup(t)
			tc.p.Now = now
			removed, err := s.Prune(tc.p)
			if err != nil || len(removed) != tc.want {
				t.Fatalf("removed %d (%v), want %d", len(removed), err, tc.want)
			}
			left, _ := s.List(Filter{})
			wantLeft := 6 - tc.want
			if tc.p.DryRun {
				wantLeft = 6
			}
			if len(left) != wantLeft {
				t.Errorf("%d left, want %d", len(left), wantLeft)
			}
			if r, err := s.Check(); err != nil || len(r.Problems) > 0 {
				t.Errorf("check after prune: %v %v", err, r.Problems)
			}
		})
	}
	s := setup(t)
	if _, err := s.Prune(Prune{}); err == nil {
		t.Error("prune without a rule removed nothing but did not complain")
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "nope", "gpusnap.db")
	if _, err := Open(missing, Options{ReadOnly: true}); !errors.Is(err, ErrNoStore) || !strings.Contains(err.Error(), "no store at "+missing) {
		t.Errorf("read-only open of a missing store: %v", err)
	}
	if _, err := os.Stat(filepath.Dir(missing)); err == nil {
		t.Error("read-only open created the directory")
	}

	s, path := openTemp(t)
	// A second writer waits for the lock, then gives up (bbolt blocks even in one process).
	start := time.Now()
	if _, err := Open(path, Options{LockTimeout: 300 * time.Millisecond}); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "locked by another gpusnap") {
		t.Errorf("second writer: %v", err)
	}
	// bbolt stops retrying one retry interval (50ms) before the timeout.
	if waited := time.Since(start); waited < 200*time.Millisecond {
		t.Errorf("second writer gave up after %s, before its lock timeout", waited)
	}
	_ = s.Close()

	// Readers share the file.
	r1, err := Open(path, Options{ReadOnly: true, LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := Open(path, Options{ReadOnly: true, LockTimeout: time.Second})
	if err != nil {
		t.Fatalf("second reader blocked by the first: %v", err)
	}
	_, _ = r1.Close(), r2.Close()

	// A newer schema is refused.
	s, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketInfo).Put(keySchema, []byte(fmt.Sprint(SchemaVersion+1)))
	}); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	for _, ro := range []bool{false, true} {
		if _, err := Open(path, Options{ReadOnly: ro}); !errors.Is(err, ErrNewer) || !strings.Contains(err.Error(), "newer") {
			t.Errorf("newer schema (read-only %v): %v", ro, err)
		}
	}
}

// compactJSON is GetJSON's parts put together as json.Marshal writes the
// whole snapshot.
func compactJSON(s *Store, id string) ([]byte, error) {
	head, procs, err := s.GetJSON(id, func(part, process []byte) []byte {
		if len(part) > 0 {
			part = append(part, ',')
		}
		return append(part, process...)
	})
	if err != nil || procs == nil {
		return head, err
	}
	at := bytes.Index(head, nullProcesses)
	return slices.Concat(head[:at], []byte(`"processes":[`), bytes.Join(procs, []byte(",")), []byte("]"), head[at+len(nullProcesses):]), nil
}

// TestGetJSONPartsOutgrowTheirGuess: a part whose processes' JSON is some
// 40 times the size of their records, past the room its buffer guessed,
// still holds each process in order.
func TestGetJSONPartsOutgrowTheirGuess(t *testing.T) {
	s, _ := openTemp(t)
	snap := fakeSnapshot(time.Now(), snapshot.LabelSnapshot, "", 300)
	if err := s.Put(snap); err != nil {
		t.Fatal(err)
	}
	lines := func(times int) func(part, process []byte) []byte {
		return func(part, process []byte) []byte {
			for range times {
				part = append(append(part, process...), '\n')
			}
			return part
		}
	}
	_, once, err := s.GetJSON(snap.ID, lines(1))
	if err != nil {
		t.Fatal(err)
	}
	_, many, err := s.GetJSON(snap.ID, lines(20))
	if err != nil || len(many) != len(once) {
		t.Fatalf("%v, %d parts and %d", err, len(many), len(once))
	}
	for i := range once {
		var want []byte
		for line := range bytes.Lines(once[i]) {
			want = append(want, bytes.Repeat(line, 20)...)
		}
		if !bytes.Equal(many[i], want) {
			t.Errorf("part %d of %d: %d bytes, want %d", i, len(once), len(many[i]), len(want))
		}
	}
}

func TestGetJSONIsWhatWasPut(t *testing.T) {
	s, _ := openTemp(t)
	now := time.Now()
	withNil := fakeSnapshot(now.Add(time.Second), snapshot.LabelSnapshot, "", 0)
	withNil.Processes = nil
	hostile := fakeSnapshot(now, snapshot.LabelSnapshot, `"processes":null`, 60)
	hostile.Processes[3].Comm = "\xff<b>\"processes\":null\u2028"
	hostile.NVML.Missing["processes"] = "null"
	for _, snap := range []*snapshot.Snapshot{hostile, withNil, fakeSnapshot(now.Add(2*time.Second), snapshot.LabelSnapshot, "", 0)} {
		if err := s.Put(snap); err != nil {
			t.Fatal(err)
		}
		raw, err := compactJSON(s, snap.ID[:20])
		if err != nil {
			t.Fatal(err)
		}
		// Not json.Marshal of Get's result: invalid UTF-8 is written as \ufffd
		// and read back as U+FFFD, which marshals as itself.
		want, _ := json.Marshal(snap)
		for _, other := range [][]byte{want} {
			if !bytes.Equal(raw, other) {
				i := 0
				for i < min(len(raw), len(other)) && raw[i] == other[i] {
					i++
				}
				t.Errorf("GetJSON differs from json.Marshal at byte %d: %q vs %q", i, raw[max(i-40, 0):min(i+40, len(raw))], other[max(i-40, 0):min(i+40, len(other))])
			}
		}
	}
}

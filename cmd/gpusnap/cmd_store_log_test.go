package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/gpusnap/gpusnap/eventlog"
)

// TestStoreCheckpointAndVerify: baselines and a diff leave leaves; a signed
// checkpoint is proved against; the diff's JSON and textfile carry the
// log's head; a copy cut back and a snapshot deleted with bbolt are named.
func TestStoreCheckpointAndVerify(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "gpusnap.db")
	g := storeArgs(t, db)
	key := filepath.Join(dir, "k")
	if code, _, errs := gpusnap(t, "keygen", "-o", key); code != 0 {
		t.Fatal(errs)
	}
	var ids []string
	for range 3 {
		code, out, errs := gpusnap(t, append([]string{"baseline", "--tenant", "job-1"}, g...)...)
		if code != 0 {
			t.Fatal(errs)
		}
		ids = append(ids, lastLine(out))
	}
	// baseline --json: the snapshot's object, and the log's head after its leaf.
	code, out, errs := gpusnap(t, append([]string{"baseline", "--tenant", "job-2", "--json"}, g...)...)
	var based struct {
		ID       string `json:"id"`
		StoreLog struct {
			Size int    `json:"size"`
			Root string `json:"root"`
		} `json:"store_log"`
	}
	if err := json.Unmarshal([]byte(out), &based); code != 0 || err != nil || based.ID == "" || based.StoreLog.Size != 4 || based.StoreLog.Root == "" {
		t.Fatalf("baseline --json: %d %v %+v %s", code, err, based, errs)
	}
	ids = append(ids, based.ID)
	early, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	textfile := filepath.Join(dir, "gpusnap.prom")
	code, out, errs = gpusnap(t, append([]string{"diff", "--tenant", "job-1", "--json", "--textfile", textfile}, g...)...)
	if code != 0 {
		t.Fatalf("diff: %d %s", code, errs)
	}
	var res struct {
		StoreLog struct {
			Origin string `json:"origin"`
			Size   int    `json:"size"`
			Root   string `json:"root"`
		} `json:"store_log"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.StoreLog.Size != 6 || !strings.HasPrefix(res.StoreLog.Origin, "gpusnap/") {
		t.Fatalf("diff's store_log: %+v %v (4 baselines, the post snapshot, the result)", res.StoreLog, err)
	}
	prom, _ := os.ReadFile(textfile)
	if !strings.Contains(string(prom), `gpusnap_store_log_size{command="diff",origin="`+res.StoreLog.Origin+`"} 6`) ||
		!strings.Contains(string(prom), `root="`+res.StoreLog.Root+`"`) {
		t.Errorf("textfile lacks the log's head:\n%s", prom)
	}
	code, cp, errs := gpusnap(t, append([]string{"store", "checkpoint", "--sign-key", key + ".key"}, g...)...)
	if code != 0 || !strings.HasPrefix(cp, res.StoreLog.Origin+"\n6\n"+res.StoreLog.Root+"\n\n— ") {
		t.Fatalf("checkpoint: %d %q %s", code, cp, errs)
	}
	cpFile := filepath.Join(dir, "cp")
	if err := os.WriteFile(cpFile, []byte(cp), 0o600); err != nil {
		t.Fatal(err)
	}
	verify := append([]string{"store", "verify", "--checkpoint", cpFile, "--pub", key + ".pub"}, g...)
	if code, out, errs := gpusnap(t, verify...); code != 0 || !strings.Contains(out, "signature verified") || !strings.Contains(out, "is consistent") {
		t.Fatalf("verify of a sound store: %d %s %s", code, out, errs)
	}

	// Cut back to the copy taken before the diff.
	if err := os.WriteFile(db, early, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := gpusnap(t, verify...); code != 1 || !strings.Contains(out, "leaf 4: the store was cut back: the checkpoint has 6 leaves, the log 4") {
		t.Errorf("verify of a store cut back: %d %s", code, out)
	}
	// A snapshot's keys deleted with bbolt.
	bdb, err := bolt.Open(db, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := bdb.Update(func(tx *bolt.Tx) error {
		for _, b := range []string{"meta", "snapshots", "refs"} {
			if err := tx.Bucket([]byte(b)).Delete([]byte(ids[1])); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	_ = bdb.Close()
	code, out, _ = gpusnap(t, append([]string{"store", "verify"}, g...)...)
	if code != 1 || !strings.Contains(out, "leaf 1: snapshot "+ids[1]+" (stored by leaf 1) is gone") {
		t.Errorf("verify of a store with a snapshot deleted: %d %s", code, out)
	}
	// Another key's checkpoint is refused as such.
	other := filepath.Join(dir, "o")
	if code, _, errs := gpusnap(t, "keygen", "-o", other); code != 0 {
		t.Fatal(errs)
	}
	code, _, errs = gpusnap(t, append([]string{"store", "verify", "--checkpoint", cpFile, "--pub", other + ".pub"}, g...)...)
	if code != 2 || !strings.Contains(errs, "checkpoint signature does not verify") {
		t.Errorf("a checkpoint of another key: %d %s", code, errs)
	}
}

// TestStoreVerifyNamesEventLogRewritten: a diff whose window read the event
// log seals where its segment's chain stood into its result leaf. store
// verify holds while the log is as it was, and names the result's leaf once
// a record of the segment is removed after the fact, or the segment is.
func TestStoreVerifyNamesEventLogRewritten(t *testing.T) {
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	g := storeArgs(t, db)
	j, err := eventlog.OpenJournal(eventlog.JournalDir(db))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := j.Append([]eventlog.Event{{Time: start, Kind: eventlog.KindWatchStart, Mode: "tracepoint"}}); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := gpusnap(t, append([]string{"baseline", "--tenant", "job-1"}, g...)...); code != 0 {
		t.Fatal(errs)
	}
	p := &eventlog.Process{PID: 4242, StartTime: 9, Comm: "miner"}
	dev := &eventlog.Device{Path: "/dev/nvidia0", Class: "nvidia"}
	if _, err := j.Append([]eventlog.Event{
		{Time: time.Now(), Kind: eventlog.KindOpen, Process: p, Device: dev, Access: "rw"},
		{Time: time.Now(), Kind: eventlog.KindExit, Process: p},
		{Time: time.Now(), Kind: eventlog.KindWatchStop},
	}); err != nil {
		t.Fatal(err)
	}
	j.Close()
	code, out, errs := gpusnap(t, append([]string{"diff", "--tenant", "job-1", "--json"}, g...)...)
	if code != exitFindings || !strings.Contains(out, `"transient_gpu_process"`) {
		t.Fatalf("diff: exit %d, %s %s", code, out, errs)
	}
	verify := append([]string{"store", "verify"}, g...)
	if code, out, errs := gpusnap(t, verify...); code != 0 {
		t.Fatalf("verify of an untouched log: %d %s %s", code, out, errs)
	}
	segs, _ := filepath.Glob(filepath.Join(eventlog.JournalDir(db), "*.jsonl"))
	if len(segs) != 1 {
		t.Fatalf("segments %v", segs)
	}
	data, err := os.ReadFile(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(data), "\n")
	// The miner's open removed: what a tenant with root would hide.
	if err := os.WriteFile(segs[0], []byte(lines[0]+strings.Join(lines[2:], "")), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, _ = gpusnap(t, verify...)
	if code != exitFindings || !strings.Contains(out, "leaf 2: the event log this result read: segment ") || !strings.Contains(out, "NOT consistent") {
		t.Errorf("verify of a log with a record removed: exit %d\n%s", code, out)
	}
	if err := os.Remove(segs[0]); err != nil {
		t.Fatal(err)
	}
	code, out, _ = gpusnap(t, verify...)
	if code != exitFindings || !strings.Contains(out, "removed from the event log after this result read it") {
		t.Errorf("verify of a log with its segment removed: exit %d\n%s", code, out)
	}
}

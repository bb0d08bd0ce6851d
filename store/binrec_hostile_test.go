package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"reflect"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/gpusnap/gpusnap/snapshot"
)

// binaryStore stores one snapshot of a process with every field set and
// returns the store's path, the snapshot's id and the record's key.
func binaryStore(t *testing.T) (path, id string, key []byte) {
	t.Helper()
	snap := fakeSnapshot(time.Now(), snapshot.LabelSnapshot, "", 0)
	snap.Processes = []snapshot.Process{*fullProcess(t)}
	path = storeOf(t, snap)
	return path, snap.ID, seqKey(1)
}

// putRecord replaces record key's form and payload, keeping its hash.
func putRecord(t *testing.T, path string, key []byte, body []byte) {
	t.Helper()
	craft(t, path, func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketProcs)
		v := b.Get(key)
		return b.Put(key, append(bytes.Clone(v[:sha256.Size]), body...))
	})
}

// storedBody is record key's form and payload as stored.
func storedBody(t *testing.T, path string, key []byte) []byte {
	t.Helper()
	var body []byte
	craft(t, path, func(tx *bolt.Tx) error {
		body = bytes.Clone(tx.Bucket(bucketProcs).Get(key)[sha256.Size:])
		return nil
	})
	if body[0] != formBinary {
		t.Fatalf("record form %d, want binary", body[0])
	}
	return body
}

// wantLoadDamaged checks that Get, GetJSON and Check each call the store
// damaged, naming want, in time.
func wantLoadDamaged(t *testing.T, path, id, want string) {
	t.Helper()
	s, err := Open(path, Options{ReadOnly: true, LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	start := time.Now()
	_, err = s.Get(id)
	wantDamaged(t, err, want, time.Since(start))
	_, err = compactJSON(s, id)
	wantDamaged(t, err, want, time.Since(start))
	wantDamaged(t, checkErr(s.Check()), want, time.Since(start))
}

// TestBinaryRecordTruncated: a binary record cut at any byte is damage,
// named, at every cut.
func TestBinaryRecordTruncated(t *testing.T) {
	path, id, key := binaryStore(t)
	body := storedBody(t, path, key)
	for _, cut := range []int{1, 2, 3, len(body) / 3, len(body) / 2, len(body) - 1} {
		putRecord(t, path, key, body[:cut])
		wantLoadDamaged(t, path, id, "process record")
	}
}

// TestBinaryRecordHostileSizes: a record claiming a string of an exabyte, a
// list of 2^60 elements, or a count the bytes left could hold but whose
// elements would take gigabytes decoded is damage, found before anything of
// that size is allocated.
func TestBinaryRecordHostileSizes(t *testing.T) {
	path, id, key := binaryStore(t)
	head := []byte{formBinary, 1} // type 1: the Process of today
	cases := map[string][]byte{
		// pid, start_time, started, ppid, then comm's length
		"huge string": binary.AppendUvarint(append(bytes.Clone(head), 2, 2, 0, 0, 0, 2), 1<<60),
		"garbage":     append(bytes.Clone(head), bytes.Repeat([]byte{0xff}, 64)...),
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			putRecord(t, path, key, body)
			wantLoadDamaged(t, path, id, "process record")
		})
	}
	// A list of 2^60 elements, and a list of a million elements that each
	// take a byte here and hundreds decoded: a type of one struct list.
	listType := (&desc{wire: wireStruct, fields: []descField{{"mappings", &desc{wire: wireSlice, elem: &desc{wire: wireStruct, fields: []descField{{"deleted", &desc{wire: wireBool}}}}}}}}).marshal(nil)
	craft(t, path, func(tx *bolt.Tx) error { return tx.Bucket(bucketTypes).Put(seqKey(9), listType) })
	huge := binary.AppendUvarint([]byte{formBinary, 9}, 1<<60+1)
	putRecord(t, path, key, huge)
	wantLoadDamaged(t, path, id, "elements in")
	wide := append(binary.AppendUvarint([]byte{formBinary, 9}, 1<<20+1), make([]byte, 1<<20)...)
	putRecord(t, path, key, wide)
	wantLoadDamaged(t, path, id, "allocation budget")
}

// TestBinaryRecordBadType: a record naming a type the store lacks, and
// types that are garbage, nest without end or claim a million fields, are
// damage.
func TestBinaryRecordBadType(t *testing.T) {
	path, id, key := binaryStore(t)
	body := storedBody(t, path, key)
	putRecord(t, path, key, append([]byte{formBinary, 77}, body[2:]...))
	wantLoadDamaged(t, path, id, "record type 77 is missing")

	deep := bytes.Repeat([]byte{byte(wirePtr)}, 10000)
	cases := map[string][]byte{
		"garbage":        {0xee, 1, 2},
		"deep":           append(deep, byte(wireBool)),
		"million fields": binary.AppendUvarint([]byte{byte(wireStruct)}, 1e6),
		"trailing bytes": append(codecDesc(t), 0),
		"map key":        {byte(wireMap), byte(wireBool), byte(wireBool)},
		"kind changed":   (&desc{wire: wireStruct, fields: []descField{{"pid", &desc{wire: wireString}}}}).marshal(nil),
	}
	for name, bad := range cases {
		t.Run(name, func(t *testing.T) {
			craft(t, path, func(tx *bolt.Tx) error { return tx.Bucket(bucketTypes).Put(seqKey(1), bad) })
			putRecord(t, path, key, body)
			wantLoadDamaged(t, path, id, "record type 1")
		})
	}
}

func codecDesc(t *testing.T) []byte {
	c, err := codecOfProcess()
	if err != nil {
		t.Fatal(err)
	}
	return c.desc
}

// TestBinaryRecordCompressionBomb: a compressed binary record that
// inflates past 16 MiB is damage.
func TestBinaryRecordCompressionBomb(t *testing.T) {
	path, id, key := binaryStore(t)
	putRecord(t, path, key, compress([]byte{formBinaryDeflate}, make([]byte, 17<<20)))
	wantLoadDamaged(t, path, id, "compression bomb")
}

// TestBinaryRecordChangedIsNamed: a binary record changed so that it still
// decodes, to another process, is named by show --json, store check and
// store verify: its JSON no longer has the hash the log's digest is over.
func TestBinaryRecordChangedIsNamed(t *testing.T) {
	path, id, key := binaryStore(t)
	body := storedBody(t, path, key)
	at := bytes.Index(body, []byte("/dev/nvidia0"))
	body[at+len("/dev/nvidia")] = '7'
	putRecord(t, path, key, body)
	s, err := Open(path, Options{ReadOnly: true, LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Get(id); err != nil {
		t.Fatalf("the changed record no longer decodes: %v", err)
	}
	_, err = compactJSON(s, id)
	wantDamaged(t, err, "another SHA-256", 0)
	rep := mustVerify(t, s, nil)
	if len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0].Detail, "was changed outside gpusnap") {
		t.Errorf("verify: %+v", rep.Problems)
	}
}

// FuzzBinaryRecord decodes arbitrary payloads as records of today's
// Process: an error or a process, never a panic, a hang or an allocation
// past the budget. The seeds, run by every go test, are real records and
// cuts of them.
func FuzzBinaryRecord(f *testing.F) {
	c, err := codecOfProcess()
	if err != nil {
		f.Fatal(err)
	}
	full := c.encode(fullProcess(f))
	f.Add(full)
	f.Add(full[:len(full)/2])
	for _, p := range fakeSnapshot(time.Now(), "", "", 51).Processes[49:] {
		f.Add(c.encode(&p))
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, payload []byte) {
		var p snapshot.Process
		err := decodeBinary(c.dec, payload, &p)
		// Decoded after a full record, sharing its lists where the bytes
		// are the same, the payload gives the same process or the same
		// refusal.
		lists := map[*desc]sharedList{}
		var first, q snapshot.Process
		if err := decodeShared(c.dec, full, &first, lists); err != nil {
			t.Fatal(err)
		}
		errShared := decodeShared(c.dec, payload, &q, lists)
		if (err == nil) != (errShared == nil) || (err == nil && !reflect.DeepEqual(p, q)) {
			t.Errorf("decoded alone (%v) and sharing lists (%v) differ", err, errShared)
		}
	})
}

// FuzzRecordType reads arbitrary type descriptors and decodes a payload by
// them into today's Process.
func FuzzRecordType(f *testing.F) {
	c, err := codecOfProcess()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(c.desc, c.encode(fullProcess(f)))
	f.Add(c.desc[:len(c.desc)/2], []byte{1, 2, 3})
	f.Add([]byte{byte(wireStruct), 1, 4, 'r', 'a', 'w', byte(wirePtr), byte(wireStruct), 0}, []byte{1})
	f.Fuzz(func(t *testing.T, descBytes, payload []byte) {
		d, err := parseDesc(descBytes)
		if err != nil {
			return
		}
		dec, err := compileDecoder(d, processType)
		if err != nil {
			return
		}
		var p snapshot.Process
		_ = decodeBinary(dec, payload, &p)
	})
}

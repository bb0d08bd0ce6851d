package store

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	bolt "go.etcd.io/bbolt"

	"github.com/gpusnap/gpusnap/capture"
	"github.com/gpusnap/gpusnap/snapshot"
)

// fill sets every field JSON writes, however deep, to a value that is not
// zero and differs from field to field, so that a field the codec lost or
// swapped changes the JSON. It follows the type, not a list of fields: a
// field added to snapshot.Process is covered the day it is added. Strings
// carry a character JSON escapes, and invalid UTF-8 inside Raw's texts.
func fill(v reflect.Value, n *int, depth int) {
	*n++
	switch {
	case v.Type() == timeType:
		loc := time.FixedZone("", 3600+*n*60)
		v.Set(reflect.ValueOf(time.Unix(1700000000+int64(*n), int64(*n)*1001).In(loc)))
		return
	}
	switch v.Kind() {
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(-int64(*n % 100))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(*n))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(*n) + 0.5)
	case reflect.String:
		v.SetString(strings.Repeat("é\"<", *n%3+1) + string(rune('a'+*n%26)))
	case reflect.Pointer:
		if depth < 6 {
			v.Set(reflect.New(v.Type().Elem()))
			fill(v.Elem(), n, depth+1)
		}
	case reflect.Slice:
		if depth < 6 {
			v.Set(reflect.MakeSlice(v.Type(), 2, 2))
			fill(v.Index(0), n, depth+1)
			fill(v.Index(1), n, depth+1)
		}
	case reflect.Map:
		if depth < 6 {
			m := reflect.MakeMap(v.Type())
			for range 2 {
				k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
				fill(k, n, depth+1)
				fill(e, n, depth+1)
				m.SetMapIndex(k, e)
			}
			v.Set(m)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if _, _, ok := jsonField(v.Type().Field(i)); ok {
				fill(v.Field(i), n, depth+1)
			}
		}
	}
}

// fullProcess is a Process with every field set, its raw maps not UTF-8.
func fullProcess(t testing.TB) *snapshot.Process {
	t.Helper()
	var p snapshot.Process
	n := 0
	fill(reflect.ValueOf(&p).Elem(), &n, 0)
	p.Raw.Maps = "7f00-7f10 rw-s 00000000 00:06 3 /dev/nvidia0\xff\xfe\n"
	return &p
}

// roundTrip checks that p's binary record reads back as the process JSON
// reads back, and marshals to p's JSON byte for byte.
func roundTrip(t *testing.T, p *snapshot.Process) {
	t.Helper()
	codec, err := codecOfProcess()
	if err != nil {
		t.Fatalf("snapshot.Process has no binary form: %v", err)
	}
	want, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var got, viaJSON snapshot.Process
	if err := decodeBinary(codec.dec, codec.encode(p), &got); err != nil {
		t.Fatalf("decode: %v", err)
	}
	if again, _ := json.Marshal(&got); !bytes.Equal(again, want) {
		t.Fatalf("binary record marshals to\n%s\nwant\n%s", again, want)
	}
	if err := json.Unmarshal(want, &viaJSON); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, viaJSON) {
		t.Errorf("binary record decodes to\n%+v\nJSON to\n%+v", got, viaJSON)
	}
	bin := codec.encode(p)
	_, w := processWriter(t)
	if js, err := writeJSON(w, bin, nil); err != nil || !bytes.Equal(js, want) {
		t.Fatalf("the JSON writer gives (%v)\n%s\nwant\n%s", err, js, want)
	}
	wantForm := byte(formBinary)
	if len(bin) >= compressFrom {
		wantForm = formBinaryDeflate
	}
	if form := codec.storedForm(bin, want, 1)[0]; form != wantForm {
		t.Errorf("Put would store a %d-byte binary record in form %d, want %d", len(bin), form, wantForm)
	}
}

// TestBinaryRecordEveryField: every field of a process, however deep, with
// local and fixed zones, escapes and invalid UTF-8, survives the codec.
func TestBinaryRecordEveryField(t *testing.T) {
	p := fullProcess(t)
	roundTrip(t, p)
	// Empty lists JSON omits read back nil, as JSON reads them.
	p.Cmdline, p.Mappings, p.Raw.Cuts = []string{}, []snapshot.Mapping{}, map[string]snapshot.Cut{}
	p.Started = time.Now() // the local zone and a monotonic reading, as a capture has
	roundTrip(t, p)
	roundTrip(t, &snapshot.Process{})
	// A record past compressFrom (a long cmdline, as a live host may hold) is
	// stored deflated, still binary.
	p.Cmdline = []string{strings.Repeat("--flag=value ", compressFrom/8)}
	roundTrip(t, p)
}

// TestBinaryRecordLiveCapture: the processes of a capture of this host, as
// it is now, each survive the codec, and a store of them shows byte for
// byte what the capture's JSON was.
func TestBinaryRecordLiveCapture(t *testing.T) {
	snap, err := capture.Capture(context.Background(), capture.Options{Path: capture.PathProc})
	if err != nil {
		t.Fatal(err)
	}
	for i := range snap.Processes {
		roundTrip(t, &snap.Processes[i])
	}
	s, _ := openTemp(t)
	if err := s.Put(snap); err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(snap)
	got, err := compactJSON(s, snap.ID)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("GetJSON differs from the capture's JSON (%v)", err)
	}
	forms := map[byte]int{}
	_ = s.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketProcs).ForEach(func(_, v []byte) error { forms[v[32]]++; return nil })
	})
	if forms[formBinary] == 0 || forms['{'] > 0 || forms[compressedRecord] > 0 {
		t.Errorf("stored forms %v: want every record binary", forms)
	}
}

// TestGetSharedIsGet: snapshots loaded together, sharing most records, are
// each what Get loads alone; a shared record found damaged names a
// snapshot that lists it.
func TestGetSharedIsGet(t *testing.T) {
	s, path := openTemp(t)
	a := fakeSnapshot(time.Now(), snapshot.LabelSnapshot, "", 200)
	b := fakeSnapshot(time.Now().Add(time.Second), snapshot.LabelSnapshot, "", 200)
	b.Processes = append(b.Processes[:50], b.Processes[60:]...)
	b.Processes[0].Comm = "changed"
	for _, snap := range []*snapshot.Snapshot{a, b} {
		if err := s.Put(snap); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.GetShared(a.ID, b.ID[:len(b.ID)-2])
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range []string{a.ID, b.ID} {
		alone, err := s.Get(id)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got[i], alone) {
			t.Errorf("GetShared's snapshot %s differs from Get's", id)
		}
	}
	// The 200 equal command lines are a few lists in GetShared's load (one
	// a decoding worker), each its own in Get's, whose caller may change it.
	lists := func(ps []snapshot.Process) int {
		seen := map[*string]bool{}
		for i := range ps {
			seen[unsafe.SliceData(ps[i].Cmdline)] = true
		}
		return len(seen)
	}
	alone, err := s.Get(a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if n, m := lists(got[0].Processes), lists(alone.Processes); n > runtime.GOMAXPROCS(0) || m != len(a.Processes) {
		t.Errorf("200 equal command lines are %d lists from GetShared, %d from Get; want at most %d, 200", n, m, runtime.GOMAXPROCS(0))
	}
	_ = s.Close()
	craft(t, path, func(tx *bolt.Tx) error {
		v := bytes.Clone(tx.Bucket(bucketProcs).Get(seqKey(100)))
		return tx.Bucket(bucketProcs).Put(seqKey(100), v[:len(v)-1])
	})
	s = reopen(t, path)
	_, err = s.GetShared(a.ID, b.ID)
	wantDamaged(t, err, "snapshot "+a.ID+": process record 100: ", 0)
}

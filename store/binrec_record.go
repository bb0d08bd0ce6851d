package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"unsafe"

	bolt "go.etcd.io/bbolt"

	"github.com/gpusnap/gpusnap/snapshot"
)

// A process record's stored form is the byte after its hash. It is '{' for
// plain JSON and compressedRecord (0) for DEFLATE of JSON, as schema 1 wrote
// them, or one of these, schema 2's binary records.
const (
	formBinary        = 2 // varint type id, then the binary payload
	formBinaryDeflate = 3 // DEFLATE of the same, for a record above compressFrom
)

// bucketTypes holds the record type descriptors of schema 2, keyed by type
// id (8 bytes, big endian). A store holds one per Process layout that wrote
// it, a handful over its life.
var bucketTypes = []byte("types")

// decodeBudget is what decoding a binary payload of n bytes may allocate. A
// decoded process takes a few times its stored bytes (its strings share one
// copy of them), and a crafted count of empty structs must not take
// gigabytes.
func decodeBudget(n int) int { return 32*n + 64<<10 }

var processType = reflect.TypeFor[snapshot.Process]()

// processCodec is the binary codec of today's snapshot.Process.
type processCodec struct {
	desc []byte // the descriptor, as stored in bucketTypes
	enc  encoder
	dec  decoder
}

// codecOfProcess builds the codec once. A Process with a field the codec has
// no form for yields an error, and every record is then stored as JSON.
var codecOfProcess = sync.OnceValues(func() (*processCodec, error) {
	t := processType
	d, err := describe(t, 0)
	if err != nil {
		return nil, err
	}
	dec, err := compileDecoder(d, t)
	if err != nil {
		return nil, err
	}
	return &processCodec{desc: d.marshal(nil), enc: compileEncoder(t, d), dec: dec}, nil
})

func (c *processCodec) encode(p *snapshot.Process) []byte {
	return c.enc(make([]byte, 0, 512), reflect.ValueOf(p).Elem())
}

// decodeBinary decodes a payload into out, which holds a zero Process. The
// payload must be used to its last byte. out's strings are the payload's
// bytes, not a copy, so the caller keeps the payload unchanged while out
// lives (inside the transaction, or a copy of the records made by
// records.detach).
func decodeBinary(dec decoder, payload []byte, out *snapshot.Process) error {
	return decodeShared(dec, payload, out, nil)
}

// decodeShared is decodeBinary that gives a list the value of the last
// list of its field decoded with lists, when both have the same bytes
// (with lists nil, every list is its own). Two processes then share one
// list, which GetShared's callers agree not to change.
func decodeShared(dec decoder, payload []byte, out *snapshot.Process, lists map[*desc]sharedList) error {
	r := &reader{b: payload, s: unsafe.String(unsafe.SliceData(payload), len(payload)), budget: decodeBudget(len(payload)), lists: lists}
	if err := dec(r, unsafe.Pointer(out)); err != nil {
		return err
	}
	if r.pos != len(payload) {
		return fmt.Errorf("%d bytes after the record", len(payload)-r.pos)
	}
	return nil
}

// storedForm is how Put stores a process with JSON js and binary encoding
// bin. It is binary, under type typ, only when bin decodes to a process that
// marshals to exactly js, else JSON. The check makes the codec's exactness a
// fact of every record, since show --json and the log's digests rely on that
// JSON.
func (c *processCodec) storedForm(bin, js []byte, typ uint64) []byte {
	var p snapshot.Process
	if decodeBinary(c.dec, bin, &p) != nil {
		return encodeRecord(js)
	}
	if again, err := json.Marshal(&p); err != nil || !bytes.Equal(again, js) {
		return encodeRecord(js)
	}
	head := binary.AppendUvarint(nil, typ)
	if len(bin) < compressFrom {
		return append(append([]byte{formBinary}, head...), bin...)
	}
	return compressWith(&recordWriters, []byte{formBinaryDeflate}, append(head, bin...))
}

// typeID returns the id of today's Process descriptor in the store, adding
// it when no record of this layout was stored before.
func typeID(tx *bolt.Tx, desc []byte) (uint64, error) {
	types, err := tx.CreateBucketIfNotExists(bucketTypes)
	if err != nil {
		return 0, err
	}
	var id uint64
	_ = types.ForEach(func(k, v []byte) error {
		if len(k) == 8 && bytes.Equal(v, desc) {
			id = binary.BigEndian.Uint64(k)
		}
		return nil
	})
	if id != 0 {
		return id, nil
	}
	if id, err = types.NextSequence(); err != nil {
		return 0, err
	}
	return id, types.Put(seqKey(id), desc)
}

// storedRec is a process record as read, its hash and its JSON (a JSON
// record) or its binary payload and the decoder of the type it names. The
// bytes may alias bbolt's mmap, so they are valid inside the transaction
// only.
type storedRec struct {
	seq  uint64
	sum  [sha256.Size]byte
	json []byte
	bin  []byte
	typ  uint64
	dec  decoder
	js   jsonWriter // nil where the stored type has none (compileJSONWriter)
}

// decode fills out, a zero Process, from the record. A binary record's
// lists may be shared through lists (decodeShared).
func (r *storedRec) decode(out *snapshot.Process, lists map[*desc]sharedList) error {
	if r.dec == nil {
		return json.Unmarshal(r.json, out)
	}
	return decodeShared(r.dec, r.bin, out, lists)
}

// appendJSON appends the record's JSON to dst, checked against its hash. A
// binary record's JSON is what its process marshals to.
func (r *storedRec) appendJSON(dst []byte) ([]byte, error) {
	js := r.json
	if r.js != nil {
		if out, err := writeJSON(r.js, r.bin, dst); err == nil && sha256.Sum256(out[len(dst):]) == r.sum {
			return out, nil
		}
	}
	if r.dec != nil {
		var p snapshot.Process
		if err := decodeBinary(r.dec, r.bin, &p); err != nil {
			return nil, err
		}
		var err error
		if js, err = json.Marshal(&p); err != nil {
			return nil, err
		}
	}
	if sha256.Sum256(js) != r.sum {
		return nil, errors.New("its JSON has another SHA-256")
	}
	return append(dst, js...), nil
}

// records reads process records in one transaction, each record type's
// decoder compiled once.
type records struct {
	procs *bolt.Bucket
	types *bolt.Bucket // nil in a store no binary record was written to
	plans map[uint64]plan
	cur   *bolt.Cursor
	at    uint64 // the record cur is on, or 0 for none
}

// value is record seq's stored value, nil when there is none. A snapshot
// lists most of its records in the order they were stored, so the cursor
// steps to the next key where it can, instead of a seek from the root.
func (rs *records) value(seq uint64) []byte {
	var key [8]byte
	binary.BigEndian.PutUint64(key[:], seq)
	if rs.cur == nil {
		rs.cur = rs.procs.Cursor()
	}
	if rs.at != 0 && rs.at+1 == seq {
		if k, v := rs.cur.Next(); bytes.Equal(k, key[:]) {
			rs.at = seq
			return v
		}
	}
	k, v := rs.cur.Seek(key[:])
	if !bytes.Equal(k, key[:]) {
		rs.at = 0
		return nil
	}
	rs.at = seq
	return v
}

// detach copies the binary records out of bbolt's mmap into one buffer, so
// the processes decoded from them outlive the transaction. It makes one
// allocation for a snapshot's records, not one for each.
func detach(recs []*storedRec) {
	size := 0
	for i := range recs {
		size += len(recs[i].bin)
	}
	buf := make([]byte, 0, size)
	for i := range recs {
		at := len(buf)
		buf = append(buf, recs[i].bin...)
		recs[i].bin = buf[at:len(buf):len(buf)]
	}
}

func newRecords(tx *bolt.Tx, procs *bolt.Bucket) *records {
	return &records{procs: procs, types: tx.Bucket(bucketTypes), plans: map[uint64]plan{}}
}

// get reads record seq. missing is a record too short to hold its hash.
func (rs *records) get(seq uint64) (rec storedRec, missing bool, err error) {
	v := rs.value(seq)
	if len(v) < sha256.Size {
		return rec, true, nil
	}
	rec, err = rs.parse(v)
	rec.seq = seq
	return rec, false, err
}

// parse reads a stored record, its hash and then its form.
func (rs *records) parse(v []byte) (storedRec, error) {
	rec := storedRec{sum: [sha256.Size]byte(v[:sha256.Size])}
	body := v[sha256.Size:]
	if len(body) == 0 || (body[0] != formBinary && body[0] != formBinaryDeflate) {
		var err error
		rec.json, err = decodeRecord(body)
		return rec, err
	}
	bin := body[1:]
	if body[0] == formBinaryDeflate {
		var err error
		if bin, err = decompress(bin, maxRecordSize); err != nil {
			return rec, err
		}
	}
	typ, k := binary.Uvarint(bin)
	if k <= 0 {
		return rec, fmt.Errorf("binary record without a type")
	}
	pl, err := rs.plan(typ)
	rec.bin, rec.typ, rec.dec, rec.js = bin[k:], typ, pl.dec, pl.js
	return rec, err
}

// A plan is how a stored record type reads into today's Process: its
// decoder, and its JSON writer where it has one.
type plan struct {
	dec decoder
	js  jsonWriter
}

// plan compiles the decoder and JSON writer of stored type id into today's
// Process.
func (rs *records) plan(id uint64) (plan, error) {
	if pl, ok := rs.plans[id]; ok {
		return pl, nil
	}
	var v []byte
	if rs.types != nil {
		v = rs.types.Get(seqKey(id))
	}
	if v == nil {
		return plan{}, fmt.Errorf("record type %d is missing", id)
	}
	d, err := parseDesc(v)
	if err != nil {
		return plan{}, fmt.Errorf("record type %d: %w", id, err)
	}
	dec, err := compileDecoder(d, processType)
	if err != nil {
		return plan{}, fmt.Errorf("record type %d: %w", id, err)
	}
	pl := plan{dec: dec}
	pl.js, _ = compileJSONWriter(d, processType) // none: decode and marshal
	rs.plans[id] = pl
	return pl, nil
}

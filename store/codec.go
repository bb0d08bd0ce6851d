package store

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
)

// A snapshot's header is JSON compressed with raw DEFLATE at its fastest
// level, as it is stored for every snapshot and read once per load. Process
// records stay plain JSON, because a load decodes hundreds of them. Only a
// record above compressFrom is compressed, behind a zero byte no JSON starts
// with, so a tenant's large repetitive record stays small.
const compressFrom = 16 << 10

// Inflating stops at these sizes, since a stranger's store may hold a
// compression bomb (gigabytes from a few kilobytes), which is damage, not
// data.
const (
	maxHeaderSize = 16 << 20
	maxRecordSize = 16 << 20
)

// compressedRecord marks a compressed process record.
const compressedRecord = 0

var writers = sync.Pool{New: func() any {
	w, _ := flate.NewWriter(nil, flate.BestSpeed) // only fails for a bad level
	return w
}}

// recordWriters compress large process records at DEFLATE's default level.
// There are few of them, and a tenant's random arguments beside its raw maps
// fit 64 KiB there but not at the fastest level.
var recordWriters = sync.Pool{New: func() any {
	w, _ := flate.NewWriter(nil, flate.DefaultCompression)
	return w
}}

var readers = sync.Pool{New: func() any { return flate.NewReader(bytes.NewReader(nil)) }}

// compress appends the DEFLATE of data to dst.
func compress(dst, data []byte) []byte { return compressWith(&writers, dst, data) }

func compressWith(pool *sync.Pool, dst, data []byte) []byte {
	buf := bytes.NewBuffer(dst)
	w := pool.Get().(*flate.Writer)
	w.Reset(buf)
	_, _ = w.Write(data) // writes to a bytes.Buffer do not fail
	_ = w.Close()
	pool.Put(w)
	return buf.Bytes()
}

// decompress inflates data into a fresh slice, at most limit bytes, since
// bbolt's values live in its mmap and must not be kept past the transaction.
func decompress(data []byte, limit int64) ([]byte, error) {
	r := readers.Get().(io.ReadCloser)
	defer readers.Put(r)
	if err := r.(flate.Resetter).Reset(bytes.NewReader(data), nil); err != nil {
		return nil, err
	}
	out := bytes.NewBuffer(make([]byte, 0, min(4*int64(len(data)), limit)))
	if n, err := out.ReadFrom(io.LimitReader(r, limit+1)); err != nil {
		return nil, err
	} else if n > limit {
		return nil, fmt.Errorf("inflates past %d bytes (a compression bomb)", limit)
	}
	return out.Bytes(), nil
}

// encodeRecord is a process record's stored form after its hash, the JSON,
// compressed when large.
func encodeRecord(json []byte) []byte {
	if len(json) < compressFrom {
		return json
	}
	return compressWith(&recordWriters, []byte{compressedRecord}, json)
}

// decodeRecord returns the JSON of a stored process record (after its hash).
// A plain record aliases bbolt's mmap.
func decodeRecord(v []byte) ([]byte, error) {
	if len(v) > 0 && v[0] == compressedRecord {
		return decompress(v[1:], maxRecordSize)
	}
	return v, nil
}

// A snapshot's process list is stored as a flag byte (1 when non-nil, keeping
// JSON null and [] apart), the count, and each record's sequence number as a
// zigzag delta from the one before. An unchanged host repeats its records in
// order, so most deltas take one byte.

func encodeRefs(seqs []uint64, isNil bool) []byte {
	out := make([]byte, 0, 1+binary.MaxVarintLen64+len(seqs)+8)
	if isNil {
		out = append(out, 0)
	} else {
		out = append(out, 1)
	}
	out = binary.AppendUvarint(out, uint64(len(seqs)))
	var prev uint64
	for _, seq := range seqs {
		out = binary.AppendVarint(out, int64(seq-prev))
		prev = seq
	}
	return out
}

var errBadRefs = errors.New("malformed process list")

func decodeRefs(data []byte) (seqs []uint64, isNil bool, err error) {
	if len(data) < 2 || data[0] > 1 {
		return nil, false, errBadRefs
	}
	isNil = data[0] == 0
	n, k := binary.Uvarint(data[1:])
	if k <= 0 || n > uint64(len(data)) {
		return nil, false, errBadRefs
	}
	data = data[1+k:]
	seqs = make([]uint64, 0, n)
	var prev uint64
	for range n {
		d, k := binary.Varint(data)
		if k <= 0 {
			return nil, false, errBadRefs
		}
		prev += uint64(d)
		seqs = append(seqs, prev)
		data = data[k:]
	}
	if len(data) != 0 || (isNil && n != 0) {
		return nil, false, errBadRefs
	}
	return seqs, isNil, nil
}

func seqKey(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

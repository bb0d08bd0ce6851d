package store

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"errors"
	"io"
	"sync"
)

// A snapshot's header (host, scan, NVML) is JSON compressed with raw DEFLATE
// at its fastest level: it is stored for every snapshot and read once per
// load. Process records stay plain JSON: deduplication already stores each
// once, and loading a snapshot decodes hundreds of them, where inflating
// each doubled the cost of show.

var writers = sync.Pool{New: func() any {
	w, _ := flate.NewWriter(nil, flate.BestSpeed) // only fails for a bad level
	return w
}}

var readers = sync.Pool{New: func() any { return flate.NewReader(bytes.NewReader(nil)) }}

// compress appends the DEFLATE of data to dst.
func compress(dst, data []byte) []byte {
	buf := bytes.NewBuffer(dst)
	w := writers.Get().(*flate.Writer)
	w.Reset(buf)
	_, _ = w.Write(data) // writes to a bytes.Buffer do not fail
	_ = w.Close()
	writers.Put(w)
	return buf.Bytes()
}

// decompress inflates data into a fresh slice: bbolt's values live in its
// mmap and must not be kept past the transaction.
func decompress(data []byte) ([]byte, error) {
	r := readers.Get().(io.ReadCloser)
	defer readers.Put(r)
	if err := r.(flate.Resetter).Reset(bytes.NewReader(data), nil); err != nil {
		return nil, err
	}
	out := bytes.NewBuffer(make([]byte, 0, 4*len(data)))
	if _, err := out.ReadFrom(r); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// A snapshot's process list is stored as the sequence numbers of its process
// records: a flag byte (1 when the list is non-nil, so JSON null and [] stay
// apart), the count, then each number as a zigzag delta from the one before.
// An unchanged host repeats the same records in the same order, so most
// deltas are 1 and take one byte.

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

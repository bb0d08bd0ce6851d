package render

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/gpusnap/gpusnap/snapshot"
)

// StoredSnapshotJSON prints a snapshot's stored JSON, as store.GetJSON
// returns it with AppendProcessJSON, exactly as SnapshotJSON prints the
// snapshot. head is the snapshot's compact JSON (as json.Marshal writes it)
// with its processes null, or all of it when procs is nil, and procs are
// its processes in parts, already indented. Nothing is decoded and
// encoded again, and head is indented without json.Indent's validating
// scan, which cost more than the rest of show --json (docs/performance.md,
// The store). head must be valid JSON, and GetJSON checks what it did not
// make itself.
func StoredSnapshotJSON(w io.Writer, head []byte, procs [][]byte) error {
	hb := appendIndent(nil, head, "")
	if procs == nil {
		_, err := w.Write(append(hb, '\n'))
		return err
	}
	at := bytes.Index(hb, processesNull)
	if at < 0 {
		return errors.New("the stored snapshot has no processes field")
	}
	return writeProcesses(w, hb, at, len(procs), func(c int) ([]byte, error) { return procs[c], nil })
}

// processesNull is where the processes go in the indented header.
var processesNull = []byte(`"processes": null`)

// encodeChunk is how many processes one encoding task takes, big enough that
// a write of the chunk is one large write, small enough to spread the work.
const encodeChunk = 32

// SnapshotJSON writes snap byte for byte as an indenting json.Encoder
// would, but encodes the processes on every CPU and writes them in chunks as
// they are ready, since one encoder over a large host's processes is a
// visible share of a capture's wall time (docs/performance.md). encoded,
// when not nil, is each process's json.Marshal output, already made for the
// store.
func SnapshotJSON(w io.Writer, snap *snapshot.Snapshot, encoded [][]byte) error {
	procs := snap.Processes
	header := *snap
	header.Processes = nil
	compact, err := json.Marshal(&header)
	if err != nil {
		return err
	}
	hb := appendIndent(nil, compact, "")
	// No string can hold the key with its quotes unescaped, so the first
	// match is the field.
	at := bytes.Index(hb, processesNull)
	if len(procs) == 0 || at < 0 {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(snap)
	}

	chunks := (len(procs) + encodeChunk - 1) / encodeChunk
	out := make([]*[]byte, chunks)
	errs := make([]error, chunks)
	ready := make([]chan struct{}, chunks)
	for i := range ready {
		ready[i] = make(chan struct{})
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	defer wg.Wait()
	for range min(runtime.GOMAXPROCS(0), chunks) {
		wg.Go(func() {
			var scratch bytes.Buffer
			for {
				c := int(next.Add(1) - 1)
				if c >= chunks {
					return
				}
				lo, hi := c*encodeChunk, min((c+1)*encodeChunk, len(procs))
				var done [][]byte
				if encoded != nil {
					done = encoded[lo:hi]
				}
				out[c], errs[c] = encodeProcesses(&scratch, procs[lo:hi], done)
				close(ready[c])
			}
		})
	}

	err = writeProcesses(w, hb, at, chunks, func(c int) ([]byte, error) {
		<-ready[c]
		if c > 0 { // written, since chunks are asked for in order
			chunkBufs.Put(out[c-1])
			out[c-1] = nil
		}
		if errs[c] != nil {
			return nil, errs[c]
		}
		return *out[c], nil
	})
	if err != nil {
		next.Store(int64(chunks)) // the workers stop after their chunk
		return err
	}
	chunkBufs.Put(out[chunks-1])
	return nil
}

// writeProcesses writes hb, an indented snapshot whose processes field, at
// at, is null, with the processes of chunk(0) to chunk(chunks-1) in that
// field instead. Each chunk holds processes as AppendProcessJSON appends them.
func writeProcesses(w io.Writer, hb []byte, at, chunks int, chunk func(c int) ([]byte, error)) error {
	// A process is an element of the array "processes" in the top object,
	// so its lines sit two levels deep, its first after the array's newline.
	if _, err := io.WriteString(w, string(hb[:at])+`"processes": [`+"\n    "); err != nil {
		return err
	}
	for c := range chunks {
		b, err := chunk(c)
		if err != nil {
			return err
		}
		if c > 0 {
			if _, err := io.WriteString(w, processSep); err != nil {
				return err
			}
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	_, err := io.WriteString(w, "\n  ]"+string(hb[at+len(processesNull):])+"\n")
	return err
}

// processSep is what separates two processes in the indented array.
const processSep = ",\n    "

// AppendProcessJSON appends process, one process's compact JSON, to chunk as
// the next element of an indented snapshot's processes array, as
// json.Indent would lay it out there.
func AppendProcessJSON(chunk, process []byte) []byte {
	if len(chunk) > 0 {
		chunk = append(chunk, processSep...)
	}
	return appendIndent(chunk, process, "    ")
}

// encodeProcesses indents procs as the elements of the snapshot's
// "processes" array, separated as json.Indent separates them. Their compact
// JSON is encoded[i] if given, else encoded into scratch.
func encodeProcesses(scratch *bytes.Buffer, procs []snapshot.Process, encoded [][]byte) (*[]byte, error) {
	buf := chunkBufs.Get().(*[]byte)
	*buf = (*buf)[:0]
	enc := json.NewEncoder(scratch)
	for i := range procs {
		if encoded != nil {
			*buf = AppendProcessJSON(*buf, encoded[i])
			continue
		}
		scratch.Reset()
		if err := enc.Encode(&procs[i]); err != nil {
			return nil, err
		}
		compact := scratch.Bytes()
		*buf = AppendProcessJSON(*buf, compact[:len(compact)-1]) // less Encode's newline
	}
	return buf, nil
}

// chunkBufs recycles the chunks' buffers once written, since fresh memory
// costs a page fault per page, more than the copy into it.
var chunkBufs = sync.Pool{New: func() any { return new([]byte) }}

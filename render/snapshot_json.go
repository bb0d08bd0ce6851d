package render

import (
	"bytes"
	"encoding/json"
	"io"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/gpusnap/gpusnap/snapshot"
)

// StoredSnapshotJSON prints a snapshot's stored JSON (compact, as
// json.Marshal writes it, as store.GetJSON returns it) exactly as
// SnapshotJSON prints the snapshot, indenting it without decoding and
// re-encoding it, and without json.Indent's validating scan, which cost more
// than the rest of show --json (docs/performance.md, The store). raw must be
// valid JSON, and GetJSON checks what it did not make itself.
func StoredSnapshotJSON(w io.Writer, raw []byte) error {
	out := appendIndent(make([]byte, 0, 2*len(raw)), raw, "")
	_, err := w.Write(append(out, '\n'))
	return err
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

	// A process is an element of the array "processes" in the top object,
	// so its lines sit two levels deep, its first after the array's newline.
	if _, err := io.WriteString(w, string(hb[:at])+`"processes": [`+"\n    "); err != nil {
		next.Store(int64(chunks)) // the workers stop after their chunk
		return err
	}
	for c := range chunks {
		<-ready[c]
		if errs[c] != nil {
			next.Store(int64(chunks))
			return errs[c]
		}
		if c > 0 {
			if _, err := io.WriteString(w, ",\n    "); err != nil {
				next.Store(int64(chunks))
				return err
			}
		}
		if _, err := w.Write(*out[c]); err != nil {
			next.Store(int64(chunks))
			return err
		}
		chunkBufs.Put(out[c])
		out[c] = nil
	}
	_, err = io.WriteString(w, "\n  ]"+string(hb[at+len(processesNull):])+"\n")
	return err
}

// encodeProcesses indents procs as the elements of the snapshot's
// "processes" array, separated as json.Indent separates them. Their compact
// JSON is encoded[i] if given, else encoded into scratch.
func encodeProcesses(scratch *bytes.Buffer, procs []snapshot.Process, encoded [][]byte) (*[]byte, error) {
	buf := chunkBufs.Get().(*[]byte)
	*buf = (*buf)[:0]
	enc := json.NewEncoder(scratch)
	for i := range procs {
		if i > 0 {
			*buf = append(*buf, ",\n    "...)
		}
		if encoded != nil {
			*buf = appendIndent(*buf, encoded[i], "    ")
			continue
		}
		scratch.Reset()
		if err := enc.Encode(&procs[i]); err != nil {
			return nil, err
		}
		compact := scratch.Bytes()
		*buf = appendIndent(*buf, compact[:len(compact)-1], "    ") // less Encode's newline
	}
	return buf, nil
}

// chunkBufs recycles the chunks' buffers once written, since fresh memory
// costs a page fault per page, more than the copy into it.
var chunkBufs = sync.Pool{New: func() any { return new([]byte) }}

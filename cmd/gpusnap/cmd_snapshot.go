package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/urfave/cli/v2"

	"github.com/gpusnap/gpusnap/nvmlread"
	"github.com/gpusnap/gpusnap/snapshot"
)

func snapshotCommand() *cli.Command {
	return &cli.Command{
		Name:  "snapshot",
		Usage: "capture the host now, store it and print its id",
		UsageText: "gpusnap snapshot [--tenant T] [--label L] [--no-store] [--json]\n\nExamples:\n  gpusnap snapshot\n" +
			"  gpusnap snapshot --json --no-nvml | jq '.processes[] | select(.mappings)'\n  gpusnap snapshot --no-store --json > host.json",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "tenant", Usage: "the tenant `T` this snapshot belongs to"},
			&cli.StringFlag{Name: "label", Value: snapshot.LabelSnapshot, Usage: "a `LABEL` for the snapshot"},
			&cli.BoolFlag{Name: "no-store", Usage: "print the snapshot without storing it"},
			&cli.StringFlag{Name: "export-nvml-fixture", Usage: "also write NVML's state to the new `FILE` as an NVML fixture (see docs/nvml.md)"},
		},
		Action: action(parseSnapshot, runSnapshot),
	}
}

// snapshotOptions are snapshot's flags.
type snapshotOptions struct {
	Tenant, Label     string
	NoStore           bool
	ExportNVMLFixture string // also write NVML's state to this new file
}

func parseSnapshot(c *cli.Context) (snapshotOptions, error) {
	return snapshotOptions{Tenant: c.String("tenant"), Label: c.String("label"), NoStore: c.Bool("no-store"),
		ExportNVMLFixture: c.String("export-nvml-fixture")}, nil
}

func runSnapshot(ctx context.Context, g globals, o snapshotOptions) error {
	snap, err := captureHost(ctx, g, o.Label, o.Tenant)
	if err != nil {
		return err
	}
	sayCapturePath(g, snap)
	if path := o.ExportNVMLFixture; path != "" {
		if err := nvmlread.ExportFixture(ctx, path, snap.NVML); err != nil {
			return err
		}
	}
	var encoded [][]byte // the processes' JSON, as stored: printed from it
	if !o.NoStore {
		if encoded, _, err = g.host().Put(snap); err != nil {
			return err
		}
	}
	if g.JSON {
		return writeSnapshotJSON(g.Stdout, snap, encoded)
	}
	return printSnapshot(g, snap)
}

// sayCapturePath says on stderr which path read the live /proc, and why
// not BPF where it was not; baseline, diff and ps record it in the
// snapshot's scan without a word (their stderr is for findings' trouble).
func sayCapturePath(g globals, snap *snapshot.Snapshot) {
	if g.ProcRoot != "/proc" {
		return // a tree laid out like /proc is read one way only
	}
	line := "capture: " + snap.Scan.CapturePath
	if snap.Scan.CaptureNote != "" {
		line += " (" + snap.Scan.CaptureNote + ")"
	}
	fmt.Fprintln(g.Stderr, line)
}

// printSnapshot prints the whole snapshot with --json, else its id alone on
// the last line, so scripts can do id=$(gpusnap snapshot).
func printSnapshot(g globals, snap *snapshot.Snapshot) error {
	if g.JSON {
		return writeSnapshotJSON(g.Stdout, snap, nil)
	}
	_, err := fmt.Fprintln(g.Stdout, snap.ID)
	return err
}

// processesNull is where the processes go in the indented header.
var processesNull = []byte(`"processes": null`)

// encodeChunk is how many processes one encoding task takes: big enough that
// a write of the chunk is one large write, small enough to spread the work.
const encodeChunk = 32

// writeSnapshotJSON writes snap byte for byte as a json.Encoder with a
// two-space indent would (show --json re-indents the stored JSON with
// json.Indent: the same bytes), but encodes the processes, nearly all of the
// bytes, on every CPU, indents them with appendIndent, and writes them chunk
// by chunk as they are ready: one encoder over a thousand processes costs as
// much wall time as a tenth of the capture. encoded, when not nil, is each
// process's compact JSON (json.Marshal), already made for the store.
func writeSnapshotJSON(w io.Writer, snap *snapshot.Snapshot, encoded [][]byte) error {
	procs := snap.Processes
	header := *snap
	header.Processes = nil
	compact, err := json.Marshal(&header)
	if err != nil {
		return err
	}
	hb := appendIndent(nil, compact, "")
	// No string can hold the key with its quotes unescaped: the first match
	// is the field.
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

	// A process is an element of the array "processes" in the top object:
	// its lines sit two levels deep, its first after the array's newline.
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

// chunkBufs recycles the chunks' buffers once written: fresh memory costs a
// page fault per page, more than the copy into it.
var chunkBufs = sync.Pool{New: func() any { return new([]byte) }}

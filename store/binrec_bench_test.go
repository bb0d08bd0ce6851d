package store

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/gpusnap/gpusnap/capture"
	"github.com/gpusnap/gpusnap/snapshot"
)

// BenchmarkDecodeRecord decodes the process records of a capture of this
// host, as JSON (schema 1) and as binary records (schema 2), one after the
// other on the same records, then turns the binary records back into their
// JSON as show --json does, decoded and marshalled (marshal) and by the
// JSON writer (writer). CPU per record is the figure.
func BenchmarkDecodeRecord(b *testing.B) {
	snap, err := capture.Capture(context.Background(), capture.Options{Path: capture.PathProc})
	if err != nil {
		b.Fatal(err)
	}
	codec, w := processWriter(b)
	var js, bins [][]byte
	for i := range snap.Processes {
		j, _ := json.Marshal(&snap.Processes[i])
		js = append(js, j)
		bins = append(bins, codec.encode(&snap.Processes[i]))
	}
	b.Logf("%d processes", len(js))
	b.Run("json", func(b *testing.B) {
		for b.Loop() {
			for _, j := range js {
				var p snapshot.Process
				if err := json.Unmarshal(j, &p); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("binary", func(b *testing.B) {
		for b.Loop() {
			for _, bin := range bins {
				var p snapshot.Process
				if err := decodeBinary(codec.dec, bin, &p); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("marshal", func(b *testing.B) {
		for b.Loop() {
			for _, bin := range bins {
				var p snapshot.Process
				if err := decodeBinary(codec.dec, bin, &p); err != nil {
					b.Fatal(err)
				}
				if _, err := json.Marshal(&p); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("writer", func(b *testing.B) {
		for b.Loop() {
			for _, bin := range bins {
				if _, err := writeJSON(w, bin, nil); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

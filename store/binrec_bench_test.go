package store

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/snapshot"
)

// BenchmarkDecodeRecord decodes the process records of a snapshot of 600
// processes, as JSON (schema 1) and as binary records (schema 2).
func BenchmarkDecodeRecord(b *testing.B) {
	snap := fakeSnapshot(time.Now(), snapshot.LabelSnapshot, "", 600)
	codec, err := codecOfProcess()
	if err != nil {
		b.Fatal(err)
	}
	var js, bins [][]byte
	for i := range snap.Processes {
		j, _ := json.Marshal(&snap.Processes[i])
		js = append(js, j)
		bins = append(bins, codec.encode(&snap.Processes[i]))
	}
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
}

package render

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/gpusnap/gpusnap/internal/ghostcase"
	"github.com/gpusnap/gpusnap/snapshot"
)

// TestSnapshotJSONAsEncoder: the parallel writer prints byte for byte
// what one indenting json.Encoder prints, and so does StoredSnapshotJSON
// from the stored compact JSON, for no process, one, and chunks full and
// partial of the ghost case's processes, hostile names among them.
func TestSnapshotJSONAsEncoder(t *testing.T) {
	base := ghostcase.New().After
	for _, n := range []int{0, 1, 2, encodeChunk, 2*encodeChunk + 5} {
		s := *base
		s.Processes = nil
		if n > 0 {
			s.Processes = []snapshot.Process{}
		}
		for i := range n {
			p := base.Processes[i%len(base.Processes)]
			p.PID = 100 + i
			p.Comm += " <&> \"\\ \u2028"
			s.Processes = append(s.Processes, p)
		}
		var want, got bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetIndent("", "  ")
		if err := enc.Encode(&s); err != nil {
			t.Fatal(err)
		}
		// The processes encoded here, or already for the store.
		stored := make([][]byte, len(s.Processes))
		for i := range stored {
			var err error
			if stored[i], err = json.Marshal(&s.Processes[i]); err != nil {
				t.Fatal(err)
			}
		}
		for _, encoded := range [][][]byte{nil, stored} {
			got.Reset()
			if err := SnapshotJSON(&got, &s, encoded); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Bytes(), want.Bytes()) {
				t.Errorf("%d processes (stored JSON given: %t): writer printed\n%s\nencoder printed\n%s", n, encoded != nil, got.Bytes(), want.Bytes())
			}
		}
		compact, err := json.Marshal(&s)
		if err != nil {
			t.Fatal(err)
		}
		got.Reset()
		if err := StoredSnapshotJSON(&got, compact); err != nil || !bytes.Equal(got.Bytes(), want.Bytes()) {
			t.Errorf("%d processes: from the stored JSON (%v):\n%s", n, err, got.Bytes())
		}
	}
}

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
		// As store.GetJSON gives it: the whole when there are no processes,
		// else the header and the processes in one part and in up to three.
		head := s
		head.Processes = nil
		if n == 0 {
			head = s
		}
		compact, err := json.Marshal(&head)
		if err != nil {
			t.Fatal(err)
		}
		for _, parts := range []int{min(1, n), min(3, n)} {
			var procs [][]byte
			for part := range parts {
				var b []byte
				for _, p := range stored[part*n/parts : (part+1)*n/parts] {
					b = AppendProcessJSON(b, p)
				}
				procs = append(procs, b)
			}
			got.Reset()
			if err := StoredSnapshotJSON(&got, compact, procs); err != nil || !bytes.Equal(got.Bytes(), want.Bytes()) {
				t.Errorf("%d processes in %d parts: from the stored JSON (%v):\n%s", n, parts, err, got.Bytes())
			}
		}
	}
}

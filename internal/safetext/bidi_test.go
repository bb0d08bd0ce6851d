package safetext

import (
	"bytes"
	"encoding/json"
	"testing"
)

// A process name with U+202E (right-to-left override) reaches --json output
// escaped, whatever the write boundaries, and decodes to the same string.
func TestJSONWriterEscapesBidi(t *testing.T) {
	name := "miner\u202egpj.exe\u2066x\u2069 ok é 日本"
	doc, err := json.Marshal(map[string]string{"comm": name})
	if err != nil {
		t.Fatal(err)
	}
	for chunk := 1; chunk <= len(doc); chunk++ {
		var out bytes.Buffer
		w := JSONWriter(&out)
		for i := 0; i < len(doc); i += chunk {
			if _, err := w.Write(doc[i:min(i+chunk, len(doc))]); err != nil {
				t.Fatal(err)
			}
		}
		if bytes.ContainsRune(out.Bytes(), 0x202e) || bytes.ContainsRune(out.Bytes(), 0x2066) || !bytes.Contains(out.Bytes(), []byte(`\u202e`)) {
			t.Fatalf("chunks of %d: %s", chunk, out.Bytes())
		}
		var back map[string]string
		if err := json.Unmarshal(out.Bytes(), &back); err != nil || back["comm"] != name {
			t.Fatalf("chunks of %d: decoded %q, %v", chunk, back["comm"], err)
		}
	}
}

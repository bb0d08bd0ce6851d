package safetext

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
	"unicode/utf8"
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

// FuzzJSONWriter holds the writer to escaping each bidi rune of its input
// and copying every other byte, whatever the write boundaries: what one
// Write copies whole, byte by byte decoding would have copied too.
func FuzzJSONWriter(f *testing.F) {
	f.Add([]byte("miner\u202egpj\u061c \u200e\u2069 é 日本 \xe2\x80 \xd8"), uint8(3))
	f.Add([]byte("\xe2\x80\xae\xe2\x81\xa6\xd8\x9c\xe2\x82\xac"), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		size := int(chunk)%16 + 1
		var got bytes.Buffer
		w := JSONWriter(&got)
		for i := 0; i < len(data); i += size {
			if _, err := w.Write(data[i:min(i+size, len(data))]); err != nil {
				t.Fatal(err)
			}
		}
		// A rune cut by the end waits for a write that would finish it.
		whole := data[:len(data)-incompleteTail(data)]
		var want []byte
		for len(whole) > 0 {
			r, n := utf8.DecodeRune(whole)
			if isBidi(r) {
				want = fmt.Appendf(want, `\u%04x`, r)
			} else {
				want = append(want, whole[:n]...)
			}
			whole = whole[n:]
		}
		if !bytes.Equal(got.Bytes(), want) {
			t.Fatalf("writes of %d: %q, want %q", size, got.Bytes(), want)
		}
	})
}

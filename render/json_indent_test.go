package render

import (
	"bytes"
	"encoding/json"
	"testing"
)

var indentSeeds = []string{
	`{}`, `[]`, `""`, `0`, `null`, `{"a":[]}`, `{"a":{},"b":[{}]}`, `[1,[2,[3,{}]],"x"]`,
	`{"k":"a\"b\\","l":"\\\\","m":"\\\"{[,:]}","n":-1.5e+10,"o":[true,false,null]}`,
	`{"pid":1,"comm":"x\u003c\u2028\ufffd","cmdline":["a","b c"],"holders":[{"fd":3,"target":"/dev/nvidia0"}],"raw":null}`,
}

// TestAppendIndentAsJSONIndent: the fast indenter writes what json.Indent
// writes, with and without a prefix.
func TestAppendIndentAsJSONIndent(t *testing.T) {
	for _, s := range indentSeeds {
		checkIndent(t, []byte(s))
	}
}

func FuzzAppendIndent(f *testing.F) {
	for _, s := range indentSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var v any
		if json.Unmarshal([]byte(s), &v) != nil {
			return
		}
		compact, err := json.Marshal(v)
		if err != nil {
			return
		}
		checkIndent(t, compact)
	})
}

func checkIndent(t *testing.T, src []byte) {
	t.Helper()
	for _, prefix := range []string{"", "    "} {
		var want bytes.Buffer
		if err := json.Indent(&want, src, prefix, "  "); err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		if got := appendIndent(nil, src, prefix); !bytes.Equal(got, want.Bytes()) {
			t.Errorf("%s with prefix %q:\ngot  %s\nwant %s", src, prefix, got, want.Bytes())
		}
	}
}

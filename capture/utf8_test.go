package capture

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/gpusnap/gpusnap/snapshot"
)

// A process whose name, command line and device path hold invalid UTF-8 must
// capture exactly as it reads back from JSON (the store), or diff would see
// it as changed.
func TestCaptureInvalidUTF8RoundTrips(t *testing.T) {
	root := t.TempDir()
	pid := filepath.Join(root, "400")
	must(t, os.MkdirAll(filepath.Join(pid, "fd"), 0o755))
	must(t, os.WriteFile(filepath.Join(pid, "stat"), []byte("400 (mi\xffner\x1b[2J) S 1 400 400 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 900 0 0\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(pid, "cmdline"), []byte("./x\xfe\xfe\x00--pool\n\x00"), 0o644))
	must(t, os.WriteFile(filepath.Join(pid, "maps"), []byte("7f0000000000-7f0000200000 rw-s 00000000 00:06 77 /tmp/w/dev/nvidia\xff9\n"), 0o644))
	must(t, os.Symlink("/tmp/w/dev/nvidia\xff9", filepath.Join(pid, "fd", "5")))

	s := captureFixture(t, root, nil)
	p := findPID(t, s, 400)
	if len(p.Mappings) != 1 || len(p.Holders) != 1 {
		t.Fatalf("the device mapping and holder were not captured: %+v", p)
	}
	if p.Comm != "mi\ufffdner\x1b[2J" || p.Cmdline[0] != "./x\ufffd\ufffd" || p.Mappings[0].Path != "/tmp/w/dev/nvidia\ufffd9" {
		t.Errorf("invalid bytes not each written as U+FFFD: comm %q cmdline %q path %q", p.Comm, p.Cmdline, p.Mappings[0].Path)
	}
	b, err := json.Marshal(s)
	must(t, err)
	var back snapshot.Snapshot
	must(t, json.Unmarshal(b, &back))
	if !reflect.DeepEqual(findPID(t, &back, 400), p) {
		t.Errorf("capture and its JSON round trip differ:\n%+v\n%+v", p, findPID(t, &back, 400))
	}
	// The raw texts are the kernel's bytes, in memory and through JSON.
	if p.Raw == nil || p.Raw.Cmdline != "./x\xfe\xfe\x00--pool\n\x00" || p.Raw.Maps != "7f0000000000-7f0000200000 rw-s 00000000 00:06 77 /tmp/w/dev/nvidia\xff9\n" {
		t.Errorf("raw texts not kept byte for byte: %+v", p.Raw)
	}
	if !bytes.Contains(b, []byte(`"cmdline":{"base64":"Li94/v4ALS1wb29sCgA="}`)) {
		t.Errorf("invalid UTF-8 raw text not base64 in JSON:\n%s", b)
	}
}

// TestRawTextJSON: valid UTF-8 stays a string; anything else is base64
// with its marker, and both read back exactly.
func TestRawTextJSON(t *testing.T) {
	for _, r := range []snapshot.Raw{
		{Maps: "7f00 r--p /usr/lib/x\n", Cmdline: "a\x00b\x00"},
		{Maps: "\xff\xfe", Status: "Name:\tmi\xc3ner\n", Cgroup: "0::/\n", Cuts: map[string]snapshot.Cut{"maps": {}}},
		{Maps: ""},
	} {
		b, err := json.Marshal(&r)
		must(t, err)
		var back snapshot.Raw
		must(t, json.Unmarshal(b, &back))
		if !reflect.DeepEqual(back, r) {
			t.Errorf("%+v -> %s -> %+v", r, b, back)
		}
	}
	var r snapshot.Raw
	if err := json.Unmarshal([]byte(`{"maps":{"base64":"%%%"}}`), &r); err == nil {
		t.Error("bad base64 accepted")
	}
}

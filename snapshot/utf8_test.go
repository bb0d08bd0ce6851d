package snapshot

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
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
	var back Snapshot
	must(t, json.Unmarshal(b, &back))
	if !reflect.DeepEqual(findPID(t, &back, 400), p) {
		t.Errorf("capture and its JSON round trip differ:\n%+v\n%+v", p, findPID(t, &back, 400))
	}
}

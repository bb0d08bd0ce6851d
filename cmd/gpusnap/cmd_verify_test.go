package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/bundle"
	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/snapshot"
)

// smallBundle writes a bundle of two hand-built snapshots, signed with key
// when it is given.
func smallBundle(t *testing.T, dir, key string) string {
	t.Helper()
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	before := &snapshot.Snapshot{ID: "20261129-100000.000000-aaaaaa", Label: snapshot.LabelBaseline, Tenant: "job-1", Host: snapshot.Host{Hostname: "n1", CaptureStart: at.Add(-2 * time.Hour)}}
	after := &snapshot.Snapshot{ID: "20261129-120000.000000-bbbbbb", Label: snapshot.LabelPost, Tenant: "job-1", Host: snapshot.Host{Hostname: "n1", CaptureStart: at}}
	in := bundle.Input{Before: before, After: after, Result: &diff.Result{From: before.ID, To: after.ID, Tenant: "job-1", Findings: []diff.Finding{}}, Version: "test"}
	if key != "" {
		k, err := bundle.ReadPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		in.SignKey = k
	}
	out := filepath.Join(dir, "b.tar.gz")
	os.Remove(out)
	if _, err := bundle.WriteFile(t.Context(), out, in, false); err != nil {
		t.Fatal(err)
	}
	return out
}

// rewrite re-packs a bundle, letting edit change, drop (return false) or add members.
func rewrite(t *testing.T, name string, edit func(h *tar.Header, data []byte) ([]byte, bool)) {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	tw := tar.NewWriter(zw)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		data, _ := io.ReadAll(tr)
		data, keep := edit(h, data)
		if !keep {
			continue
		}
		h.Size = int64(len(data))
		tw.WriteHeader(h)
		tw.Write(data)
	}
	tw.Close()
	zw.Close()
	if err := os.WriteFile(name, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestKeygenAndVerify(t *testing.T) {
	dir := t.TempDir()
	prefix := filepath.Join(dir, "site")
	code, out, errOut := gpusnap(t, "keygen", "-o", prefix)
	if code != 0 || !strings.Contains(out, "public key: ") {
		t.Fatalf("keygen: %d %q %q", code, out, errOut)
	}
	if code, _, errOut := gpusnap(t, "keygen", "-o", prefix); code != 2 || !strings.Contains(errOut, "exists (use --force") {
		t.Errorf("keygen over existing keys: %d %q", code, errOut)
	}
	if code, _, errOut := gpusnap(t, "keygen"); code != 2 || !strings.Contains(errOut, "-o PREFIX") {
		t.Errorf("keygen without -o: %d %q", code, errOut)
	}
	if code, _, _ := gpusnap(t, "keygen", "-o", filepath.Join(dir, "other"), "--json"); code != 0 {
		t.Fatal("second keygen failed")
	}

	file := smallBundle(t, dir, prefix+".key")
	code, out, errOut = gpusnap(t, "verify", file, "--pub", prefix+".pub")
	if code != 0 || !strings.Contains(out, "signature: valid, by the given key") || !strings.Contains(out, "b.tar.gz: intact (10 files)") ||
		!strings.Contains(out, "ok  ") || !strings.Contains(out, "report.html") {
		t.Errorf("verify: %d\n%s%s", code, out, errOut)
	}
	code, out, _ = gpusnap(t, "verify", file)
	if code != 0 || !strings.Contains(out, "pass --pub to check who signed it") {
		t.Errorf("verify without --pub: %d\n%s", code, out)
	}
	code, out, _ = gpusnap(t, "verify", file, "--pub", filepath.Join(dir, "other.pub"))
	if code != 1 || !strings.Contains(out, "WRONG KEY: statement.dsse.json: signed by key") || !strings.Contains(out, "NOT INTACT") {
		t.Errorf("verify with the wrong key: %d\n%s", code, out)
	}

	code, out, _ = gpusnap(t, "verify", "--json", file)
	var rep struct {
		File   string `json:"file"`
		Intact bool   `json:"intact"`
		bundle.Verification
	}
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil || !rep.Intact || rep.Predicate.Tenant != "job-1" || len(rep.Entries) != 11 {
		t.Errorf("verify --json: %d %v\n%s", code, err, out)
	}

	rewrite(t, file, func(h *tar.Header, data []byte) ([]byte, bool) {
		if strings.HasSuffix(h.Name, "/data/report.md") {
			data[10] ^= 1
		}
		return data, true
	})
	code, out, _ = gpusnap(t, "verify", file)
	if code != 1 || !strings.Contains(out, "ALTERED: data/report.md: SHA-256") {
		t.Errorf("verify of an altered report.md: %d\n%s", code, out)
	}
}

func TestVerifyExitStatus(t *testing.T) {
	dir := t.TempDir()
	file := smallBundle(t, dir, "")
	rewrite(t, file, func(h *tar.Header, data []byte) ([]byte, bool) {
		return data, !strings.HasSuffix(h.Name, "/manifest-sha256.txt")
	})
	code, out, _ := gpusnap(t, "verify", file)
	if code != 1 || !strings.Contains(out, "REMOVED: manifest-sha256.txt: manifest-sha256.txt missing") || !strings.Contains(out, "ADDED: data/report.md") {
		t.Errorf("missing manifest: %d\n%s", code, out)
	}

	file = smallBundle(t, dir, "")
	rewrite(t, file, func(h *tar.Header, data []byte) ([]byte, bool) {
		if strings.HasSuffix(h.Name, "/data/report.html") {
			h.Name = strings.TrimSuffix(h.Name, "report.html") + "report\x1b[2J.html"
		}
		return data, true
	})
	code, out, _ = gpusnap(t, "verify", file)
	if code != 1 || strings.Contains(out, "\x1b") || !strings.Contains(out, `ADDED: data/report\x1b[2J.html`) || !strings.Contains(out, "REMOVED: data/report.html") {
		t.Errorf("renamed member: %d\n%s", code, out)
	}

	notGzip := filepath.Join(dir, "notgz")
	os.WriteFile(notGzip, []byte("hello"), 0o600)
	for _, args := range [][]string{{"verify", notGzip}, {"verify", filepath.Join(dir, "absent")}, {"verify"}, {"verify", file, "--pub", notGzip}} {
		if code, _, errOut := gpusnap(t, args...); code != 2 || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%q: exit %d, stderr %q; want 2 and one line", args, code, errOut)
		}
	}
	if _, _, errOut := gpusnap(t, "verify", notGzip); !strings.Contains(errOut, "cannot read bundle: not a gzip file") {
		t.Errorf("not gzip: %q", errOut)
	}

	// A tarball of files at its top (an older bundle's layout) is named as
	// a layout not known, exit 2, not as a bag missing its manifest.
	file = smallBundle(t, t.TempDir(), "")
	rewrite(t, file, func(h *tar.Header, data []byte) ([]byte, bool) {
		_, rest, _ := strings.Cut(h.Name, "/")
		h.Name = rest
		return data, rest != ""
	})
	if code, _, errOut := gpusnap(t, "verify", file); code != 2 || !strings.Contains(errOut, "not a gpusnap bundle of a layout this gpusnap knows") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("a flat tarball: %d %q", code, errOut)
	}
}

// TestVerifyExtractedDirectory: verify takes the directory a bundle was
// extracted to (by tar itself), and names a file planted in it.
func TestVerifyExtractedDirectory(t *testing.T) {
	dir := t.TempDir()
	file := smallBundle(t, dir, "")
	out, err := exec.Command("tar", "-xzf", file, "-C", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("tar: %v %s", err, out)
	}
	bag := filepath.Join(dir, "b")
	if code, out, errOut := gpusnap(t, "verify", bag); code != 0 || !strings.Contains(out, "intact (10 files)") {
		t.Fatalf("verify of the extracted bag: %d %s %s", code, out, errOut)
	}
	if err := os.WriteFile(filepath.Join(bag, "data", "planted"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := gpusnap(t, "verify", bag); code != 1 || !strings.Contains(out, "ADDED: data/planted") {
		t.Errorf("verify of a bag with a planted file: %d %s", code, out)
	}
}

// fullWriter is a stdout on a full disk.
type fullWriter struct{}

func (fullWriter) Write([]byte) (int, error) { return 0, syscall.ENOSPC }

// TestVerifyListingNotWrittenIsAnError: `gpusnap verify F > report` on a
// full disk exits 2, not 0 with an empty report.
func TestVerifyListingNotWrittenIsAnError(t *testing.T) {
	file := smallBundle(t, t.TempDir(), "")
	var errOut bytes.Buffer
	code := run(context.Background(), []string{"gpusnap", "verify", file}, fullWriter{}, &errOut)
	if code != exitError || !strings.Contains(errOut.String(), "no space left on device") {
		t.Errorf("exit %d, stderr %q", code, errOut.String())
	}
}

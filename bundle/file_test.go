package bundle

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/internal/safefile"
)

func TestWriteFileIsExclusive(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "b.tar.gz")
	if _, err := WriteFile(t.Context(), out, testInput(), false); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(out)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("bundle mode %v, err %v; want 0600", fi.Mode(), err)
	}
	first, _ := os.ReadFile(out)
	if rep, err := Verify(bytes.NewReader(first), nil); err != nil || !rep.Intact() {
		t.Fatalf("written bundle: %v %+v", err, rep)
	}

	if _, err := WriteFile(t.Context(), out, testInput(), false); err == nil || !strings.Contains(err.Error(), "exists (use --force") {
		t.Errorf("second write without force: %v", err)
	}
	// --force replaces it through a rename, leaving no temporary file.
	in := testInput()
	in.UID = 1000
	if _, err := WriteFile(t.Context(), out, in, true); err != nil {
		t.Fatal(err)
	}
	if second, _ := os.ReadFile(out); bytes.Equal(first, second) {
		t.Error("--force did not replace the bundle")
	}
	if fi, _ := os.Stat(out); fi.Mode().Perm() != 0o600 {
		t.Errorf("replaced bundle mode %v", fi.Mode())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries after --force, want 1", len(entries))
	}
}

func TestWriteFileRefusesSymlinks(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "shadow")
	if err := os.WriteFile(target, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, dest := range map[string]string{"link": target, "dangling": filepath.Join(dir, "nowhere")} {
		link := filepath.Join(dir, name)
		if err := os.Symlink(dest, link); err != nil {
			t.Fatal(err)
		}
		for _, force := range []bool{false, true} {
			_, err := WriteFile(t.Context(), link, testInput(), force)
			if err == nil || !strings.Contains(err.Error(), "symbolic link") {
				t.Errorf("%s, force=%v: %v", name, force, err)
			}
		}
		if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("%s was replaced", name)
		}
	}
	if b, _ := os.ReadFile(target); string(b) != "precious" {
		t.Errorf("symlink target changed: %q", b)
	}
	if _, err := os.Lstat(filepath.Join(dir, "nowhere")); err == nil {
		t.Error("a dangling link's target was created")
	}
}

func TestWriteFileRefusesDirectoryAndCleansUp(t *testing.T) {
	dir := t.TempDir()
	if _, err := WriteFile(t.Context(), dir, testInput(), true); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("writing over a directory: %v", err)
	}
	// A failed write leaves nothing behind, with or without force.
	boom := errors.New("boom")
	for _, force := range []bool{false, true} {
		out := filepath.Join(dir, "partial")
		err := safefile.Create(t.Context(), out, 0o600, force, func(w io.Writer) error { w.Write([]byte("half")); return boom })
		if !errors.Is(err, boom) {
			t.Errorf("force=%v: err %v", force, err)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("force=%v: left %d files behind", force, len(entries))
		}
	}
}

func TestKeyPair(t *testing.T) {
	dir := t.TempDir()
	prefix := filepath.Join(dir, "incident")
	pub, err := WriteKeyPair(t.Context(), prefix, false)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]os.FileMode{".key": 0o600, ".pub": 0o644} {
		fi, err := os.Stat(prefix + name)
		if err != nil || fi.Mode().Perm() != want&^umask(t) {
			t.Errorf("%s: mode %v, err %v", name, fi.Mode(), err)
		}
	}
	priv, err := ReadPrivateKey(prefix + ".key")
	if err != nil {
		t.Fatal(err)
	}
	readPub, err := ReadPublicKey(prefix + ".pub")
	if err != nil || !readPub.Equal(pub) || !priv.Public().(ed25519.PublicKey).Equal(pub) {
		t.Fatalf("keys do not match: %v", err)
	}
	if _, err := WriteKeyPair(t.Context(), prefix, false); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("second keygen: %v", err)
	}
	if _, err := ReadPublicKey(prefix + ".key"); err == nil || !strings.Contains(err.Error(), `want "PUBLIC KEY"`) {
		t.Errorf("private key read as public: %v", err)
	}
	if _, err := ReadPrivateKey(filepath.Join(dir, "missing.key")); err == nil {
		t.Error("missing key read")
	}
	os.WriteFile(filepath.Join(dir, "junk"), []byte("not pem"), 0o600)
	if _, err := ReadPrivateKey(filepath.Join(dir, "junk")); err == nil || !strings.Contains(err.Error(), "not a PEM file") {
		t.Errorf("junk key: %v", err)
	}
}

func umask(t *testing.T) os.FileMode {
	t.Helper()
	f := filepath.Join(t.TempDir(), "probe")
	if err := os.WriteFile(f, nil, 0o777); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(f)
	return 0o777 &^ fi.Mode().Perm()
}

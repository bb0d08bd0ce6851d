package bundle

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/gpusnap/gpusnap/internal/testenv"
)

// python is Debian's interpreter, which sees Debian's python3-securesystemslib
// and python3-cryptography (CI installs them; a python3 of its own, earlier
// on PATH, would not).
func python(t *testing.T) string {
	t.Helper()
	testenv.NotShort(t, "needs python3-securesystemslib and python3-cryptography")
	path := findPython()
	if path == "" {
		testenv.Missing(t, "a python3 with python3-securesystemslib and python3-cryptography")
	}
	return path
}

var findPython = sync.OnceValue(func() string {
	for _, p := range []string{"/usr/bin/python3", "python3"} {
		if path, err := exec.LookPath(p); err == nil && exec.Command(path, "-c", "import securesystemslib.signer, cryptography").Run() == nil {
			return path
		}
	}
	return ""
})

// stock runs one of the stock-tool scripts in testdata on a bag.
func stock(t *testing.T, script string, args ...string) (string, bool) {
	t.Helper()
	out, err := exec.Command(python(t), append([]string{filepath.Join("testdata", script)}, args...)...).CombinedOutput()
	return string(out), err == nil
}

// TestStockToolsVerify: a signed bundle, extracted, is a valid bag to an
// RFC 8493 validator and a verified DSSE envelope to securesystemslib,
// neither gpusnap's code; each tampering fails at least one of them.
func TestStockToolsVerify(t *testing.T) {
	dir := t.TempDir()
	if _, err := WriteKeyPair(t.Context(), filepath.Join(dir, "k"), false); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteKeyPair(t.Context(), filepath.Join(dir, "other"), false); err != nil {
		t.Fatal(err)
	}
	key, err := ReadPrivateKey(filepath.Join(dir, "k.key"))
	if err != nil {
		t.Fatal(err)
	}
	in := testInput()
	in.SignKey = key
	b := writeBundle(t, in)
	fresh := func() string {
		d := t.TempDir()
		extract(t, b, d)
		return filepath.Join(d, DefaultName(in.After.ID))
	}
	pub := filepath.Join(dir, "k.pub")
	bag := fresh()
	if out, ok := stock(t, "bagit_validate.py", bag); !ok || !strings.HasPrefix(out, "VALID: 15 payload files") {
		t.Fatalf("the BagIt validator: %s", out)
	}
	if out, ok := stock(t, "verify_dsse.py", bag, pub); !ok || !strings.Contains(out, "15 subjects, predicate "+PredicateType) {
		t.Fatalf("securesystemslib: %s", out)
	}

	flip := func(bag, name string, at int) {
		p := filepath.Join(bag, name)
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		data[at] ^= 1
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// One byte of one payload file.
	bag = fresh()
	flip(bag, "data/findings.json", 10)
	if out, ok := stock(t, "bagit_validate.py", bag); ok || !strings.Contains(out, "data/findings.json checksum mismatch") {
		t.Errorf("validator, payload byte: %s", out)
	}
	if out, ok := stock(t, "verify_dsse.py", bag, pub); ok || !strings.Contains(out, "data/findings.json does not match") {
		t.Errorf("securesystemslib, payload byte: %s", out)
	}
	// One byte of the statement, in the signed payload.
	bag = fresh()
	envPath := filepath.Join(bag, FileEnvelope)
	var env map[string]any
	raw, _ := os.ReadFile(envPath)
	if err := json.Unmarshal(raw, &env); err != nil {
		t.Fatal(err)
	}
	payload, _ := base64.StdEncoding.DecodeString(env["payload"].(string))
	payload[len(payload)/2] ^= 1
	env["payload"] = base64.StdEncoding.EncodeToString(payload)
	raw, _ = json.Marshal(env)
	if err := os.WriteFile(envPath, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, ok := stock(t, "verify_dsse.py", bag, pub); ok || !strings.Contains(out, "signature") {
		t.Errorf("securesystemslib, statement byte: %s", out)
	}
	if out, ok := stock(t, "bagit_validate.py", bag); ok || !strings.Contains(out, FileEnvelope) {
		t.Errorf("validator (tag manifest), statement byte: %s", out)
	}
	// A swapped key: the bundle checked against another public key.
	if out, ok := stock(t, "verify_dsse.py", fresh(), filepath.Join(dir, "other.pub")); ok || !strings.Contains(out, "no signature by key") {
		t.Errorf("securesystemslib, swapped key: %s", out)
	}
	// An extra file in the payload.
	bag = fresh()
	if err := os.WriteFile(filepath.Join(bag, "data", "planted"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, ok := stock(t, "bagit_validate.py", bag); ok || !strings.Contains(out, "data/planted is not listed") {
		t.Errorf("validator, extra file: %s", out)
	}
	if out, ok := stock(t, "verify_dsse.py", bag, pub); ok || !strings.Contains(out, "data/planted is not a subject") {
		t.Errorf("securesystemslib, extra file: %s", out)
	}
	// gpusnap's own verify agrees on each, from the extracted directory.
	if rep, err := VerifyDir(bag, nil); err != nil || rep.Intact() || !named(rep, "data/planted") {
		t.Errorf("VerifyDir, extra file: %v %+v", err, rep)
	}
}

// TestVerifyDir checks an extracted bundle: the bag's directory or the one
// it was extracted into; a symlink planted in it is a member, not followed.
func TestVerifyDir(t *testing.T) {
	in := testInput()
	in.SignKey = testKey()
	dir := t.TempDir()
	extract(t, writeBundle(t, in), dir)
	bag := filepath.Join(dir, DefaultName(in.After.ID))
	for _, d := range []string{bag, dir} {
		rep, err := VerifyDir(d, nil)
		if err != nil || !rep.Intact() || !rep.Signature.Valid || len(rep.Entries) != 25 {
			t.Fatalf("VerifyDir(%s): %v %+v", d, err, rep)
		}
	}
	if err := os.Symlink("/etc/shadow", filepath.Join(bag, "data", "raw", "shadow")); err != nil {
		t.Fatal(err)
	}
	rep, err := VerifyDir(bag, nil)
	if err != nil || rep.Intact() || !named(rep, "data/raw/shadow") {
		t.Errorf("a planted symlink: %v %+v", err, rep)
	}
	if _, err := VerifyDir(t.TempDir(), nil); err == nil || !strings.Contains(err.Error(), "layout") {
		t.Errorf("an empty directory: %v", err)
	}
}

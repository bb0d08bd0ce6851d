package bundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/ed25519"
	"io"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/internal/ghostcase"
)

// t0 is the case's FROM capture time.
var t0 = ghostcase.T0

// testInput is the shared ghost case as a bundle's input.
func testInput() Input {
	c := ghostcase.New()
	return Input{Before: c.Before, After: c.After, Result: c.Result, Version: "1.0.0-test", UID: 0,
		TenantStart: c.TenantStart, TenantEnd: c.TenantEnd}
}

// testKey is a fixed key, so signed bundles are reproducible in tests too.
func testKey() ed25519.PrivateKey {
	return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))
}

func writeBundle(t *testing.T, in Input) []byte {
	t.Helper()
	var b bytes.Buffer
	if _, err := Write(&b, in); err != nil {
		t.Fatalf("Write: %v", err)
	}
	return b.Bytes()
}

type tarMember struct {
	hdr  tar.Header
	data []byte
}

func readMembers(t *testing.T, b []byte) []tarMember {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var out []tarMember
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tarMember{*hdr, data})
	}
}

// writeMembers re-packs members as another tool would after tampering.
func writeMembers(t *testing.T, ms []tarMember) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	tw := tar.NewWriter(zw)
	for _, m := range ms {
		hdr := m.hdr
		hdr.Size = int64(len(m.data))
		if err := tw.WriteHeader(&hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(m.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// memberData is the bytes of the member name (relative to the bag's directory).
func memberData(t *testing.T, b []byte, name string) []byte {
	t.Helper()
	for _, m := range readMembers(t, b) {
		if rel(m.hdr.Name) == name {
			return m.data
		}
	}
	t.Fatalf("bundle has no %s", name)
	return nil
}

func verifyBytes(t *testing.T, b []byte, pub ed25519.PublicKey) *Verification {
	t.Helper()
	rep, err := Verify(bytes.NewReader(b), pub)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	return rep
}

// rel is a member's name relative to the bag's directory.
func rel(name string) string {
	_, r, _ := strings.Cut(name, "/")
	return r
}

// named reports whether a problem names file.
func named(rep *Verification, file string) bool {
	for _, p := range rep.Problems {
		if p.Name == file {
			return true
		}
	}
	return false
}

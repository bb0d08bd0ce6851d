package bundle

import (
	"bytes"
	"compress/gzip"
	"crypto/ed25519"
	"errors"
	"strings"
	"testing"
)

// TestVerifyCatchesEveryFlippedByte flips one byte of each file in turn, at
// its start, middle and end, re-packs the archive, and expects verify to name
// that file.
func TestVerifyCatchesEveryFlippedByte(t *testing.T) {
	for _, signed := range []bool{false, true} {
		in := testInput()
		var pub ed25519.PublicKey
		if signed {
			in.SignKey = testKey()
			pub = testKey().Public().(ed25519.PublicKey)
		}
		orig := readMembers(t, writeBundle(t, in))
		files := 0
		for i, m := range orig {
			if len(m.data) == 0 {
				continue // a directory
			}
			files++
			for _, at := range []int{0, len(m.data) / 2, len(m.data) - 1} {
				ms := append([]tarMember(nil), orig...)
				data := bytes.Clone(m.data)
				data[at] ^= 0x01
				ms[i].data = data
				rep := verifyBytes(t, writeMembers(t, ms), pub)
				if rep.Intact() || !named(rep, m.hdr.Name) {
					t.Errorf("signed=%v: flipped byte %d of %s: problems %+v", signed, at, m.hdr.Name, rep.Problems)
				}
			}
		}
		if want := 17 + map[bool]int{false: 0, true: 1}[signed]; files != want {
			t.Errorf("signed=%v: flipped bytes in %d files, want %d", signed, files, want)
		}
	}
}

func TestVerifyRemovedAndAdded(t *testing.T) {
	orig := readMembers(t, writeBundle(t, testInput()))
	for i, m := range orig {
		ms := append(append([]tarMember(nil), orig[:i]...), orig[i+1:]...)
		rep := verifyBytes(t, writeMembers(t, ms), nil)
		if strings.HasSuffix(m.hdr.Name, "/") {
			continue // a directory entry holds nothing to lose
		}
		if rep.Intact() || !named(rep, m.hdr.Name) {
			t.Errorf("removed %s: problems %+v", m.hdr.Name, rep.Problems)
		}
	}

	extra := orig[len(orig)-1]
	extra.hdr.Name, extra.data = "raw/666@990000/environ", []byte("AWS_SECRET=planted\n")
	rep := verifyBytes(t, writeMembers(t, append(append([]tarMember(nil), orig...), extra)), nil)
	if rep.Intact() || !named(rep, "raw/666@990000/environ") || rep.Problems[0].Status != StatusAdded {
		t.Errorf("added file: problems %+v", rep.Problems)
	}

	dup := append(append([]tarMember(nil), orig...), orig[2])
	if rep := verifyBytes(t, writeMembers(t, dup), nil); rep.Intact() || !named(rep, orig[2].hdr.Name) {
		t.Errorf("duplicated %s: problems %+v", orig[2].hdr.Name, rep.Problems)
	}

	link := orig[len(orig)-1]
	link.hdr.Name, link.hdr.Typeflag, link.hdr.Linkname, link.data = "maps/evil", '2', "/etc/shadow", nil
	if rep := verifyBytes(t, writeMembers(t, append(append([]tarMember(nil), orig...), link)), nil); rep.Intact() || !named(rep, "maps/evil") {
		t.Errorf("added symlink: problems %+v", rep.Problems)
	}
}

// TestVerifyEditedManifest edits the tenant in manifest.json. Unsigned,
// SHA256SUMS catches it; signed, the signature catches it even when
// SHA256SUMS was rewritten to match.
func TestVerifyEditedManifest(t *testing.T) {
	edit := func(ms []tarMember, fixSums bool) []tarMember {
		ms = append([]tarMember(nil), ms...)
		var man []byte
		for i := range ms {
			if ms[i].hdr.Name == FileManifest {
				ms[i].data = bytes.Replace(ms[i].data, []byte(`"tenant": "job-4242"`), []byte(`"tenant": "job-9999"`), 1)
				man = ms[i].data
			}
		}
		for i := range ms {
			if fixSums && ms[i].hdr.Name == FileSums {
				ms[i].data = []byte(strings.Replace(string(ms[i].data), sumOf(ms[i].data, FileManifest), sha256Hex(man), 1))
			}
		}
		return ms
	}
	unsigned := readMembers(t, writeBundle(t, testInput()))
	if rep := verifyBytes(t, writeMembers(t, edit(unsigned, false)), nil); rep.Intact() || !named(rep, FileManifest) {
		t.Errorf("unsigned, edited manifest: problems %+v", rep.Problems)
	}
	in := testInput()
	in.SignKey = testKey()
	signed := readMembers(t, writeBundle(t, in))
	for _, fix := range []bool{false, true} {
		rep := verifyBytes(t, writeMembers(t, edit(signed, fix)), nil)
		if rep.Intact() || rep.Signature.Valid || !named(rep, FileSignature) {
			t.Errorf("signed, edited manifest (SHA256SUMS fixed: %v): problems %+v", fix, rep.Problems)
		}
	}
}

func TestVerifySignature(t *testing.T) {
	in := testInput()
	in.SignKey = testKey()
	b := writeBundle(t, in)
	good := testKey().Public().(ed25519.PublicKey)
	other := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{8}, 32)).Public().(ed25519.PublicKey)

	if rep := verifyBytes(t, b, nil); !rep.Intact() || !rep.Signature.Valid || rep.Signature.Trusted {
		t.Errorf("no key given: %+v %+v", rep.Problems, rep.Signature)
	}
	rep := verifyBytes(t, b, other)
	if rep.Intact() || rep.Signature.Trusted || !named(rep, FileSignature) || !strings.Contains(rep.Problems[0].Detail, KeyID(good)) {
		t.Errorf("wrong key: %+v %+v", rep.Problems, rep.Signature)
	}
	// An unsigned bundle checked with a key is not intact: the signature is missing.
	if rep := verifyBytes(t, writeBundle(t, testInput()), good); rep.Intact() || !named(rep, FileSignature) {
		t.Errorf("unsigned bundle with a key: %+v", rep.Problems)
	}
	// Stripping the signature from a signed bundle is caught without a key too.
	var ms []tarMember
	for _, m := range readMembers(t, b) {
		if m.hdr.Name != FileSignature {
			ms = append(ms, m)
		}
	}
	if rep := verifyBytes(t, writeMembers(t, ms), nil); rep.Intact() || !named(rep, FileSignature) {
		t.Errorf("stripped signature: %+v", rep.Problems)
	}
}

func TestVerifyUnreadable(t *testing.T) {
	good := writeBundle(t, testInput())
	var notTar bytes.Buffer
	zw := gzip.NewWriter(&notTar)
	zw.Write(bytes.Repeat([]byte("not a tar header "), 100))
	zw.Close()
	badCRC := bytes.Clone(good)
	badCRC[len(badCRC)-6] ^= 0xff // in the gzip trailer's CRC-32
	for name, b := range map[string][]byte{
		"empty":     nil,
		"not gzip":  []byte("PK\x03\x04 a zip file"),
		"not tar":   notTar.Bytes(),
		"truncated": good[:len(good)/2],
		"bad crc":   badCRC,
	} {
		if _, err := Verify(bytes.NewReader(b), nil); !errors.Is(err, ErrUnreadable) {
			t.Errorf("%s: err = %v, want ErrUnreadable", name, err)
		}
	}
}

func TestVerifyMissingManifestAndTrailingData(t *testing.T) {
	var ms []tarMember
	for _, m := range readMembers(t, writeBundle(t, testInput())) {
		if m.hdr.Name != FileManifest {
			ms = append(ms, m)
		}
	}
	rep := verifyBytes(t, writeMembers(t, ms), nil)
	if rep.Intact() || len(rep.Problems) != 1 || rep.Problems[0].Detail != "manifest.json missing: nothing in the bundle can be checked" {
		t.Errorf("missing manifest: %+v", rep.Problems)
	}
	for _, e := range rep.Entries {
		if e.Name != FileManifest && e.Status != StatusUnchecked {
			t.Errorf("%s: %s without a manifest", e.Name, e.Status)
		}
	}

	// Data hidden after the tar end marker, inside the same gzip stream.
	raw := writeMembers(t, readMembers(t, writeBundle(t, testInput())))
	zr, _ := gzip.NewReader(bytes.NewReader(raw))
	var plain bytes.Buffer
	plain.ReadFrom(zr)
	plain.WriteString("hidden payload")
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write(plain.Bytes())
	zw.Close()
	if rep := verifyBytes(t, b.Bytes(), nil); rep.Intact() || !named(rep, "(end of archive)") {
		t.Errorf("trailing data: %+v", rep.Problems)
	}
}

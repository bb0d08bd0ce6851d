package bundle

import (
	"bytes"
	"compress/gzip"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// cited reports whether a problem names file, or names it in its detail
// (a tag manifest's hash edited is the file it lists not matching it).
func cited(rep *Verification, file string) bool {
	for _, p := range rep.Problems {
		if p.Name == file || strings.Contains(p.Detail, file) {
			return true
		}
	}
	return false
}

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
				if rep.Intact() || !cited(rep, rel(m.hdr.Name)) {
					t.Errorf("signed=%v: flipped byte %d of %s: problems %+v", signed, at, m.hdr.Name, rep.Problems)
				}
			}
		}
		// 15 payload files; bagit.txt, bag-info.txt, the two manifests and the statement.
		if files != 20 {
			t.Errorf("signed=%v: flipped bytes in %d files, want 20", signed, files)
		}
	}
}

func TestVerifyRemovedAndAdded(t *testing.T) {
	orig := readMembers(t, writeBundle(t, testInput()))
	for i, m := range orig {
		ms := append(append([]tarMember(nil), orig[:i]...), orig[i+1:]...)
		if strings.HasSuffix(m.hdr.Name, "/") {
			continue // a directory entry holds nothing to lose
		}
		if rel(m.hdr.Name) == FileBagIt {
			// Without bagit.txt it is no bag: named as a layout not known.
			if _, err := Verify(bytes.NewReader(writeMembers(t, ms)), nil); !errors.Is(err, ErrUnknownLayout) {
				t.Errorf("removed bagit.txt: %v", err)
			}
			continue
		}
		if rep := verifyBytes(t, writeMembers(t, ms), nil); rep.Intact() || !named(rep, rel(m.hdr.Name)) {
			t.Errorf("removed %s: problems %+v", m.hdr.Name, rep.Problems)
		}
	}
	bag := strings.TrimSuffix(orig[0].hdr.Name, "/")

	extra := orig[len(orig)-1]
	extra.hdr.Name, extra.data = bag+"/data/raw/666@990000/environ", []byte("AWS_SECRET=planted\n")
	rep := verifyBytes(t, writeMembers(t, append(append([]tarMember(nil), orig...), extra)), nil)
	if rep.Intact() || !named(rep, "data/raw/666@990000/environ") || rep.Problems[0].Status != StatusAdded {
		t.Errorf("added file: problems %+v", rep.Problems)
	}
	extra.hdr.Name = bag + "/README"
	if rep := verifyBytes(t, writeMembers(t, append(append([]tarMember(nil), orig...), extra)), nil); rep.Intact() || !named(rep, "README") {
		t.Errorf("added tag file: problems %+v", rep.Problems)
	}
	extra.hdr.Name = "elsewhere/x"
	if rep := verifyBytes(t, writeMembers(t, append(append([]tarMember(nil), orig...), extra)), nil); rep.Intact() || !named(rep, "elsewhere/x") {
		t.Errorf("a file outside the bag: problems %+v", rep.Problems)
	}

	dup := append(append([]tarMember(nil), orig...), orig[2])
	if rep := verifyBytes(t, writeMembers(t, dup), nil); rep.Intact() || !named(rep, rel(orig[2].hdr.Name)) {
		t.Errorf("duplicated %s: problems %+v", orig[2].hdr.Name, rep.Problems)
	}

	link := orig[len(orig)-1]
	link.hdr.Name, link.hdr.Typeflag, link.hdr.Linkname, link.data = bag+"/data/maps/evil", '2', "/etc/shadow", nil
	if rep := verifyBytes(t, writeMembers(t, append(append([]tarMember(nil), orig...), link)), nil); rep.Intact() || !named(rep, "data/maps/evil") {
		t.Errorf("added symlink: problems %+v", rep.Problems)
	}
}

// editMember replaces the member name (bag-relative) with edit's result,
// and, with fixTags, rewrites tagmanifest-sha256.txt to match, as a forger
// who knows the format would.
func editMember(t *testing.T, ms []tarMember, name string, fixTags bool, edit func([]byte) []byte) []tarMember {
	t.Helper()
	ms = append([]tarMember(nil), ms...)
	tags := map[string][]byte{}
	at := -1
	for i := range ms {
		r := rel(ms[i].hdr.Name)
		if r == name {
			ms[i].data = edit(bytes.Clone(ms[i].data))
		}
		switch {
		case r == FileTagManifest:
			at = i
		case r != "" && !strings.Contains(r, "/"):
			tags[r] = ms[i].data
		}
	}
	if fixTags {
		ms[at].data = manifestText(tags)
	}
	return ms
}

// TestVerifyEditedStatement edits the tenant in the statement. Unsigned,
// the tag manifest catches it; signed, the signature catches it even when
// the tag manifest was rewritten to match.
func TestVerifyEditedStatement(t *testing.T) {
	retenant := func(b []byte) []byte {
		return bytes.Replace(b, []byte(`"tenant":"job-4242"`), []byte(`"tenant":"job-9999"`), 1)
	}
	unsigned := readMembers(t, writeBundle(t, testInput()))
	if rep := verifyBytes(t, writeMembers(t, editMember(t, unsigned, FileStatement, false, retenant)), nil); rep.Intact() || !named(rep, FileStatement) {
		t.Errorf("unsigned, edited statement: problems %+v", rep.Problems)
	}
	in := testInput()
	in.SignKey = testKey()
	signed := readMembers(t, writeBundle(t, in))
	inEnvelope := func(b []byte) []byte {
		var env map[string]any
		if err := json.Unmarshal(b, &env); err != nil {
			t.Fatal(err)
		}
		payload, _ := base64.StdEncoding.DecodeString(env["payload"].(string))
		edited := retenant(payload)
		if bytes.Equal(edited, payload) {
			t.Fatal("the statement names no tenant job-4242")
		}
		env["payload"] = base64.StdEncoding.EncodeToString(edited)
		out, _ := json.Marshal(env)
		return out
	}
	for _, fix := range []bool{false, true} {
		rep := verifyBytes(t, writeMembers(t, editMember(t, signed, FileEnvelope, fix, inEnvelope)), nil)
		if rep.Intact() || rep.Signature.Valid || !named(rep, FileEnvelope) {
			t.Errorf("signed, edited statement (tag manifest fixed: %v): problems %+v", fix, rep.Problems)
		}
	}
	// A payload byte changed with both manifests fixed: the signed subjects catch it.
	forged := editMember(t, signed, "data/report.md", false, func(b []byte) []byte { return append(b, "forged\n"...) })
	for i := range forged {
		if rel(forged[i].hdr.Name) == FileManifest {
			files := map[string][]byte{}
			for _, m := range forged {
				if r := rel(m.hdr.Name); strings.HasPrefix(r, "data/") && !strings.HasSuffix(r, "/") {
					files[r] = m.data
				}
			}
			forged[i].data = manifestText(files)
		}
	}
	forged = editMember(t, forged, FileManifest, true, func(b []byte) []byte { return b })
	rep := verifyBytes(t, writeMembers(t, forged), nil)
	found := false
	for _, p := range rep.Problems {
		found = found || (p.Name == "data/report.md" && strings.Contains(p.Detail, "the statement says"))
	}
	if !found {
		t.Errorf("payload edited, manifests fixed: problems %+v", rep.Problems)
	}
}

func TestVerifySignature(t *testing.T) {
	in := testInput()
	in.SignKey = testKey()
	b := writeBundle(t, in)
	good := testKey().Public().(ed25519.PublicKey)
	other := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{8}, 32)).Public().(ed25519.PublicKey)

	if rep := verifyBytes(t, b, nil); !rep.Intact() || !rep.Signature.Valid || rep.Signature.Trusted || rep.Signature.KeyID != KeyID(good) {
		t.Errorf("no key given: %+v %+v", rep.Problems, rep.Signature)
	}
	rep := verifyBytes(t, b, other)
	if rep.Intact() || rep.Signature.Trusted || !named(rep, FileEnvelope) || !strings.Contains(rep.Problems[0].Detail, KeyID(good)) {
		t.Errorf("wrong key: %+v %+v", rep.Problems, rep.Signature)
	}
	// An unsigned bundle checked with a key is not intact: the signature is missing.
	if rep := verifyBytes(t, writeBundle(t, testInput()), good); rep.Intact() || !named(rep, FileEnvelope) {
		t.Errorf("unsigned bundle with a key: %+v", rep.Problems)
	}
	// Stripping the envelope from a signed bundle is caught without a key too.
	var ms []tarMember
	for _, m := range readMembers(t, b) {
		if rel(m.hdr.Name) != FileEnvelope {
			ms = append(ms, m)
		}
	}
	if rep := verifyBytes(t, writeMembers(t, ms), nil); rep.Intact() || !named(rep, FileEnvelope) {
		t.Errorf("stripped signature: %+v", rep.Problems)
	}
	// A swapped key: the statement re-signed by another key, naming it.
	in.SignKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{8}, 32))
	swapped := writeBundle(t, in)
	if rep := verifyBytes(t, swapped, good); rep.Intact() || rep.Signature.Trusted || !named(rep, FileEnvelope) {
		t.Errorf("a bundle re-signed by another key: %+v", rep.Problems)
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
	// A tarball of another layout (an older bundle: files at its top) is
	// named as such, not as a bag missing its manifest.
	var flat []tarMember
	for _, m := range readMembers(t, good) {
		if r := rel(m.hdr.Name); r != "" {
			m.hdr.Name = r
			flat = append(flat, m)
		}
	}
	if _, err := Verify(bytes.NewReader(writeMembers(t, flat)), nil); !errors.Is(err, ErrUnknownLayout) || !strings.Contains(err.Error(), "layout") {
		t.Errorf("a flat tarball: %v", err)
	}
}

func TestVerifyMissingManifestAndTrailingData(t *testing.T) {
	var ms []tarMember
	for _, m := range readMembers(t, writeBundle(t, testInput())) {
		if rel(m.hdr.Name) != FileManifest {
			ms = append(ms, m)
		}
	}
	rep := verifyBytes(t, writeMembers(t, ms), nil)
	if rep.Intact() || !named(rep, FileManifest) || !named(rep, "data/before.json") {
		t.Errorf("missing payload manifest: %+v", rep.Problems)
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

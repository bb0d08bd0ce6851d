package bundle

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
)

// ErrUnreadable wraps every reason a file cannot be read as a bundle at all:
// not gzip, not tar, truncated, a bad gzip checksum.
var ErrUnreadable = errors.New("cannot read bundle")

// Entry statuses in a verify report.
const (
	StatusOK        = "ok"
	StatusAltered   = "altered"
	StatusAdded     = "added"
	StatusRemoved   = "removed"
	StatusDuplicate = "duplicate"
	StatusUnchecked = "unchecked" // no readable manifest to check it against
)

// Verification is what Verify found: each member checked, and the problems.
type Verification struct {
	Manifest  *Manifest       `json:"manifest,omitempty"`
	Entries   []Entry         `json:"entries"`  // in archive order, then what was removed
	Problems  []Problem       `json:"problems"` // empty when the bundle is intact
	Signature SignatureStatus `json:"signature"`
}

// Intact reports whether nothing was altered, added or removed.
func (r *Verification) Intact() bool { return len(r.Problems) == 0 }

// Entry is one member of the archive, or one the manifest lists and the
// archive lacks.
type Entry struct {
	Name   string `json:"name"`
	Type   string `json:"type"` // file, dir, symlink, hardlink, char, block, fifo, other
	Size   int64  `json:"size"`
	Status string `json:"status"`
}

// Problem names one thing that is not as the manifest says.
type Problem struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Detail string `json:"detail"`
}

// SignatureStatus says what manifest.sig proved.
type SignatureStatus struct {
	Signed    bool   `json:"signed"`
	Valid     bool   `json:"valid"`      // the signature verifies with the key the manifest names
	PublicKey string `json:"public_key"` // that key, base64
	// Trusted: valid, and made by the key given to Verify. A valid signature
	// that is not trusted only shows the manifest was not changed after it was
	// signed, by whoever holds that key.
	Trusted bool `json:"trusted"`
}

// smallLimit bounds the files verify keeps in memory (manifest, signature,
// SHA256SUMS, the first of each name only); every other file is hashed as it
// streams past.
const smallLimit = 16 << 20

// A bundle is a stranger's file: its entries, each entry's size and the
// bytes hashed in all are bounded before the work is done. A tar header
// claims its size (a sparse entry of a terabyte takes a few bytes), so a
// claim over a limit is refused before a byte of it is hashed. gpusnap's own
// bundles are far inside: two snapshots and a few files per process.
const (
	maxEntries   = 100_000
	maxEntrySize = 1 << 30
	maxTotal     = 4 << 30
)

type member struct {
	name, typ string
	size      int64
	sha256    string
	data      []byte // only for the small files verify parses
	status    string
}

// Verify reads a bundle and checks every file against the manifest, the
// manifest against SHA256SUMS, and manifest.sig; with trusted set, the
// signature must be that key's. An error (wrapping ErrUnreadable) means the
// file could not be read at all; anything found wrong inside a readable
// archive is a Problem in the report.
func Verify(r io.Reader, trusted ed25519.PublicKey) (*Verification, error) {
	members, trailing, err := readArchive(r)
	if err != nil {
		return nil, err
	}
	v := &verifier{rep: &Verification{Problems: []Problem{}}, members: members, byName: map[string]*member{}}
	for _, m := range members {
		if first := v.byName[m.name]; first != nil {
			// Which copy a tool extracts is up to the tool: neither is trusted.
			first.status, m.status = StatusDuplicate, StatusDuplicate
			v.rep.Problems = append(v.rep.Problems, Problem{Name: m.name, Status: StatusDuplicate, Detail: "the archive holds it more than once"})
			continue
		}
		v.byName[m.name] = m
	}
	if trailing {
		v.problem("(end of archive)", StatusAdded, "data after the end of the tar archive")
	}
	if v.readManifest() {
		v.checkSignature(trusted)
		v.checkFiles()
		v.checkSums()
	}
	for _, m := range members {
		if m.status == "" {
			m.status = StatusUnchecked
		}
		v.rep.Entries = append(v.rep.Entries, Entry{Name: m.name, Type: m.typ, Size: m.size, Status: m.status})
	}
	v.rep.Entries = append(v.rep.Entries, v.removed...)
	return v.rep, nil
}

type verifier struct {
	rep      *Verification
	members  []*member // in archive order, so problems are reported in a stable order
	byName   map[string]*member
	manifest []byte
	removed  []Entry
}

func (v *verifier) problem(name, status, detail string) {
	v.rep.Problems = append(v.rep.Problems, Problem{Name: name, Status: status, Detail: detail})
	if m := v.byName[name]; m != nil && m.status != StatusDuplicate {
		m.status = status
	}
}

func (v *verifier) missing(name, detail string) {
	v.rep.Problems = append(v.rep.Problems, Problem{Name: name, Status: StatusRemoved, Detail: detail})
	v.removed = append(v.removed, Entry{Name: name, Type: "file", Status: StatusRemoved})
}

// readManifest parses manifest.json; without a readable one nothing else can
// be checked.
func (v *verifier) readManifest() bool {
	m := v.byName[FileManifest]
	if m == nil || m.typ != "file" {
		v.missing(FileManifest, "manifest.json missing: nothing in the bundle can be checked")
		return false
	}
	var man Manifest
	if err := json.Unmarshal(m.data, &man); err != nil {
		v.problem(FileManifest, StatusAltered, "not valid JSON: "+err.Error())
		return false
	}
	if man.Format != Format {
		v.problem(FileManifest, StatusAltered, fmt.Sprintf("format %q, want %q", man.Format, Format))
		return false
	}
	v.rep.Manifest = &man
	v.manifest = m.data
	m.status = StatusOK
	return true
}

// checkSignature checks manifest.sig against the key the manifest names and,
// when given, the trusted key.
func (v *verifier) checkSignature(trusted ed25519.PublicKey) {
	man := v.rep.Manifest
	sig := v.byName[FileSignature]
	st := &v.rep.Signature
	switch {
	case man.Signer == nil && sig == nil:
		if trusted != nil {
			v.missing(FileSignature, "the bundle is not signed, and a public key was given to check it with")
		}
		return
	case man.Signer == nil:
		v.problem(FileSignature, StatusAdded, "the manifest names no signer")
		return
	case sig == nil:
		v.missing(FileSignature, "the manifest names a signer but the signature is gone")
		return
	}
	st.Signed = true
	st.PublicKey = man.Signer.PublicKey
	key, err := base64.StdEncoding.DecodeString(man.Signer.PublicKey)
	if man.Signer.Algorithm != "ed25519" || err != nil || len(key) != ed25519.PublicKeySize {
		v.problem(FileManifest, StatusAltered, "its signer is not a valid ed25519 public key")
		return
	}
	if sig.typ != "file" || !ed25519.Verify(key, v.manifest, sig.data) {
		v.problem(FileSignature, StatusAltered, "the signature of manifest.json does not verify: manifest.sig or manifest.json was altered")
		return
	}
	st.Valid = true
	sig.status = StatusOK
	if trusted != nil {
		if !bytes.Equal(key, trusted) {
			v.problem(FileSignature, "wrong key", fmt.Sprintf("signed by key %s, not by the given key %s", man.Signer.PublicKey, KeyID(trusted)))
			return
		}
		st.Trusted = true
	}
}

// checkFiles compares every member with the manifest's list.
func (v *verifier) checkFiles() {
	listed := map[string]FileHash{}
	dirs := map[string]bool{}
	for _, f := range v.rep.Manifest.Files {
		listed[f.Name] = f
		for d := path.Dir(f.Name); d != "." && d != "/"; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	for _, m := range v.members {
		name := m.name
		if m.status != "" || name == FileSums {
			continue // already judged (a duplicate too), or checked by checkSums
		}
		want, ok := listed[name]
		switch {
		case m.typ == "dir" && dirs[strings.TrimSuffix(name, "/")]:
			m.status = StatusOK
		case !ok:
			v.problem(name, StatusAdded, fmt.Sprintf("a %s the manifest does not list", m.typ))
		case m.typ != "file":
			v.problem(name, StatusAltered, fmt.Sprintf("a %s, the manifest lists a file", m.typ))
		case m.sha256 != want.SHA256 || m.size != want.Size:
			v.problem(name, StatusAltered, fmt.Sprintf("SHA-256 %s (%d bytes), the manifest says %s (%d bytes)", m.sha256, m.size, want.SHA256, want.Size))
		default:
			m.status = StatusOK
		}
	}
	for _, f := range v.rep.Manifest.Files {
		if m := v.byName[f.Name]; m == nil {
			v.missing(f.Name, "listed in the manifest, absent from the archive")
		}
	}
}

// checkSums checks SHA256SUMS, the sha256sum -c view of the bundle: it must be
// exactly what the manifest renders to, with manifest.json's own hash.
func (v *verifier) checkSums() {
	m := v.byName[FileSums]
	if m == nil {
		v.missing(FileSums, "SHA256SUMS missing")
		return
	}
	actual := sha256Hex(v.manifest)
	recorded := sumOf(m.data, FileManifest)
	if recorded != actual {
		detail := fmt.Sprintf("manifest.json's SHA-256 is %s, SHA256SUMS says %q", actual, recorded)
		if v.rep.Signature.Valid {
			// The signed manifest is as it was signed: SHA256SUMS is what changed.
			v.problem(FileSums, StatusAltered, detail)
			return
		}
		v.problem(FileManifest, StatusAltered, detail+": manifest.json or SHA256SUMS was altered")
		v.problem(FileSums, StatusAltered, detail+": manifest.json or SHA256SUMS was altered")
		return
	}
	if !bytes.Equal(m.data, sums(v.rep.Manifest.Files, v.manifest)) {
		v.problem(FileSums, StatusAltered, "it does not match the manifest's list of files")
		return
	}
	m.status = StatusOK
}

// sumOf is the hash SHA256SUMS records for name, or "" when it has none.
func sumOf(sums []byte, name string) string {
	sc := bufio.NewScanner(bytes.NewReader(sums))
	for sc.Scan() {
		hash, file, ok := strings.Cut(sc.Text(), "  ")
		if ok && file == name {
			return hash
		}
	}
	return ""
}

// readArchive reads every member of a tar.gz, hashing each, keeping the small
// files verify parses, and reading the gzip stream to its end so its checksum
// is checked. trailing reports non-zero data after the tar end marker.
func readArchive(r io.Reader) (members []*member, trailing bool, err error) {
	zr, err := gzip.NewReader(bufio.NewReader(r))
	if err != nil {
		return nil, false, fmt.Errorf("%w: not a gzip file: %v", ErrUnreadable, err)
	}
	tr := tar.NewReader(zr)
	total := int64(0)
	kept := map[string]bool{}
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, false, fmt.Errorf("%w: not a tar archive: %v", ErrUnreadable, err)
		}
		switch {
		case len(members) == maxEntries:
			return nil, false, fmt.Errorf("%w: more than %d entries", ErrUnreadable, maxEntries)
		case hdr.Size > maxEntrySize:
			return nil, false, fmt.Errorf("%w: %s claims %d bytes, more than %d GiB", ErrUnreadable, hdr.Name, hdr.Size, maxEntrySize>>30)
		case total+hdr.Size > maxTotal:
			return nil, false, fmt.Errorf("%w: its entries claim more than %d GiB in all", ErrUnreadable, maxTotal>>30)
		}
		total += hdr.Size
		m := &member{name: hdr.Name, typ: typeName(hdr.Typeflag)}
		h := sha256.New()
		var keep bytes.Buffer
		var w io.Writer = h
		var src io.Reader = io.LimitReader(tr, hdr.Size)
		if m.typ == "file" && (m.name == FileManifest || m.name == FileSignature || m.name == FileSums) && !kept[m.name] {
			// A second copy of a name is a duplicate, trusted by no one:
			// hashed, not kept.
			kept[m.name] = true
			if hdr.Size > smallLimit {
				return nil, false, fmt.Errorf("%w: %s is over %d MiB", ErrUnreadable, hdr.Name, smallLimit>>20)
			}
			w = io.MultiWriter(h, &keep)
		}
		n, err := io.Copy(w, src)
		if err != nil {
			return nil, false, fmt.Errorf("%w: %s: %v", ErrUnreadable, hdr.Name, err)
		}
		m.size, m.sha256, m.data = n, hex.EncodeToString(h.Sum(nil)), keep.Bytes()
		members = append(members, m)
	}
	// What follows the tar's end is read to check the gzip checksum, within
	// what is left of the budget: a stream of zeros after it could be endless.
	nonZero := &nonZeroWriter{}
	rest := maxTotal - total
	n, err := io.Copy(nonZero, io.LimitReader(zr, rest+1))
	if err != nil {
		return nil, false, fmt.Errorf("%w: %v", ErrUnreadable, err)
	}
	if n > rest {
		return nil, false, fmt.Errorf("%w: more than %d GiB of data", ErrUnreadable, maxTotal>>30)
	}
	return members, nonZero.seen, nil
}

type nonZeroWriter struct{ seen bool }

func (w *nonZeroWriter) Write(p []byte) (int, error) {
	for _, b := range p {
		if b != 0 {
			w.seen = true
			break
		}
	}
	return len(p), nil
}

func typeName(t byte) string {
	switch t {
	case tar.TypeReg:
		return "file"
	case tar.TypeDir:
		return "dir"
	case tar.TypeSymlink:
		return "symlink"
	case tar.TypeLink:
		return "hardlink"
	case tar.TypeChar:
		return "char"
	case tar.TypeBlock:
		return "block"
	case tar.TypeFifo:
		return "fifo"
	}
	return "other"
}

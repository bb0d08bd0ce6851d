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
	"sort"
	"strings"

	"github.com/gpusnap/gpusnap/snapshot"
	"github.com/gpusnap/gpusnap/store/tlog"
)

// ErrUnreadable wraps every reason a file cannot be read as a bundle at all,
// such as not gzip, not tar, truncated or a bad gzip checksum.
var ErrUnreadable = errors.New("cannot read bundle")

// ErrUnknownLayout says a readable archive or directory holds no BagIt bag
// in one top-level directory, so it is not laid out as a bundle this
// gpusnap knows.
var ErrUnknownLayout = errors.New("not a gpusnap bundle of a layout this gpusnap knows")

// Entry statuses in a verify report.
const (
	StatusOK        = "ok"
	StatusAltered   = "altered"
	StatusAdded     = "added"
	StatusRemoved   = "removed"
	StatusDuplicate = "duplicate"
	StatusUnchecked = "unchecked" // nothing readable to check it against
)

// Verification is what Verify found, each member checked and the problems.
type Verification struct {
	Bag       string          `json:"bag"` // the bag's directory
	Predicate *Predicate      `json:"predicate,omitempty"`
	Entries   []Entry         `json:"entries"`  // in archive order, then what was removed
	Problems  []Problem       `json:"problems"` // empty when the bundle is intact
	Signature SignatureStatus `json:"signature"`
	// StoreProved says the bundle carries its snapshots' inclusion in the
	// store's log, every proof holds at its checkpoint, and each snapshot
	// file is the snapshot its leaf recorded.
	StoreProved bool `json:"store_proved"`
	// StoreNote says why the proofs were not all checked, when not.
	StoreNote string `json:"store_note,omitempty"`
}

// Intact reports whether nothing was altered, added or removed.
func (r *Verification) Intact() bool { return len(r.Problems) == 0 }

// Entry is one member of the bag, or one its manifests list and it lacks.
type Entry struct {
	Name   string `json:"name"`
	Type   string `json:"type"` // file, dir, symlink, hardlink, char, block, fifo, other
	Size   int64  `json:"size"`
	Status string `json:"status"`
}

// Problem names one thing that is not as the bag and statement say.
type Problem struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Detail string `json:"detail"`
}

// SignatureStatus says what the DSSE envelope proved.
type SignatureStatus struct {
	Signed    bool   `json:"signed"`
	Valid     bool   `json:"valid"`      // the envelope verifies with the key the statement names
	PublicKey string `json:"public_key"` // that key, base64
	KeyID     string `json:"keyid"`
	// Trusted says the signature is valid and made by the key given to
	// Verify. A valid signature that is not trusted only shows the statement
	// was not changed after it was signed, by whoever holds that key.
	Trusted bool `json:"trusted"`
}

// smallLimit bounds the tag files verify keeps in memory (the first of each
// name only). Every payload file is hashed as it streams past.
const smallLimit = maxStatement

// A bundle is a stranger's file, so its entries, their sizes and the bytes
// hashed in all are bounded before any work. A tar header only claims its
// size (a sparse terabyte takes a few bytes), so a claim over a limit is
// refused before a byte is hashed. gpusnap's own bundles are far inside.
const (
	maxEntries   = 100_000
	maxEntrySize = 1 << 30
	maxTotal     = 4 << 30
)

type member struct {
	name, typ string // name relative to the bag's directory, where dirs end in /
	size      int64
	sha256    string
	data      []byte // only for the tag files verify parses
	status    string
}

// maxSnapshotKeep bounds a snapshot file verify keeps to check it against
// its leaf in the store's log. A larger one is said to be unchecked.
const maxSnapshotKeep = 96 << 20

// keepLimit is how much of a bag-relative file verify keeps. It keeps tag
// files and the two snapshots, which it parses, and 0 of the rest, hashed as
// they stream.
func keepLimit(name string) int64 {
	switch {
	case isTag(name):
		return smallLimit
	case name == DirPayload+"/"+FileBefore || name == DirPayload+"/"+FileAfter:
		return maxSnapshotKeep
	}
	return 0
}

// isTag reports whether a bag-relative name is a tag file verify reads.
func isTag(name string) bool {
	switch name {
	case FileBagIt, FileBagInfo, FileManifest, FileTagManifest, FileEnvelope, FileStatement:
		return true
	}
	return false
}

// Verify reads a bundle tarball and checks it (see check). With trusted
// set, the signature must be that key's. An error (wrapping ErrUnreadable or
// ErrUnknownLayout) means it could not be read as a bundle at all, while
// anything found wrong inside a readable bag is a Problem in the report.
func Verify(r io.Reader, trusted ed25519.PublicKey) (*Verification, error) {
	members, trailing, err := readArchive(r)
	if err != nil {
		return nil, err
	}
	bag, inBag, outside, err := bagMembers(members)
	if err != nil {
		return nil, err
	}
	v := newVerifier(bag, inBag)
	for _, m := range outside {
		v.rep.Problems = append(v.rep.Problems, Problem{Name: m.name, Status: StatusAdded, Detail: "outside the bag's directory " + bag})
		m.status = StatusAdded
	}
	if trailing {
		v.problem("(end of archive)", StatusAdded, "data after the end of the tar archive")
	}
	return v.check(trusted, append(outside, inBag...)), nil
}

// bagMembers finds the tarball's one top-level directory and names its
// members relative to it. Members elsewhere are outside.
func bagMembers(members []*member) (bag string, inBag, outside []*member, err error) {
	for _, m := range members {
		if top, rest, ok := strings.Cut(m.name, "/"); ok && rest == FileBagIt && ValidName(top) {
			bag = top
			break
		}
	}
	if bag == "" {
		return "", nil, nil, fmt.Errorf("%w: no DIR/%s (a bundle holds one directory, a BagIt bag; an older gpusnap's bundle has manifest.json at its top)", ErrUnknownLayout, FileBagIt)
	}
	for _, m := range members {
		rest, ok := strings.CutPrefix(m.name, bag+"/")
		switch {
		case m.name == bag+"/" && m.typ == "dir":
			m.status = StatusOK
			inBag = append(inBag, &member{name: "", typ: "dir", status: StatusOK})
		case ok && rest != "":
			m.name = rest
			inBag = append(inBag, m)
		default:
			outside = append(outside, m)
		}
	}
	return bag, inBag, outside, nil
}

type verifier struct {
	rep      *Verification
	members  []*member // in archive order, so problems are reported in a stable order
	byName   map[string]*member
	removed  []Entry
	subjects map[string]string
}

func newVerifier(bag string, members []*member) *verifier {
	v := &verifier{rep: &Verification{Bag: bag, Problems: []Problem{}}, byName: map[string]*member{}}
	for _, m := range members {
		if m.name == "" {
			continue // the bag's directory itself
		}
		v.members = append(v.members, m)
		if first := v.byName[m.name]; first != nil {
			// Which copy a tool extracts is up to the tool, so neither is trusted.
			first.status, m.status = StatusDuplicate, StatusDuplicate
			v.rep.Problems = append(v.rep.Problems, Problem{Name: m.name, Status: StatusDuplicate, Detail: "the bag holds it more than once"})
			continue
		}
		v.byName[m.name] = m
	}
	return v
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

// tag returns a tag file's bytes, or nil (named as removed) when the bag
// lacks it as a regular file.
func (v *verifier) tag(name string) []byte {
	m := v.byName[name]
	if m == nil || m.typ != "file" {
		v.missing(name, name+" missing")
		return nil
	}
	return m.data
}

// check checks the bag as RFC 8493 validates one (bagit.txt, every payload
// file against manifest-sha256.txt, every tag file against
// tagmanifest-sha256.txt, Payload-Oxum). It then checks the statement's
// signature, its subjects against the payload, the findings' digest and the
// store's inclusion proofs.
func (v *verifier) check(trusted ed25519.PublicKey, all []*member) *Verification {
	if b := v.tag(FileBagIt); b != nil && string(b) != bagitTxt {
		v.problem(FileBagIt, StatusAltered, fmt.Sprintf("not BagIt 1.0's declaration: %q", b))
	}
	v.checkManifest(FileManifest, func(name string) bool { return strings.HasPrefix(name, DirPayload+"/") })
	v.checkManifest(FileTagManifest, func(name string) bool { return !strings.Contains(name, "/") && name != FileTagManifest })
	v.checkOxum()
	v.checkStatement(trusted)
	for _, m := range v.members {
		switch {
		case m.status != "":
		case m.typ == "dir":
			m.status = StatusOK // every file in it was judged on its own
		default:
			v.problem(m.name, StatusAdded, fmt.Sprintf("a %s no manifest of the bag lists", m.typ))
		}
	}
	for _, m := range all {
		if m.name == "" {
			continue
		}
		if m.status == "" {
			m.status = StatusUnchecked
		}
		v.rep.Entries = append(v.rep.Entries, Entry{Name: m.name, Type: m.typ, Size: m.size, Status: m.status})
	}
	v.rep.Entries = append(v.rep.Entries, v.removed...)
	return v.rep
}

// checkManifest checks every member that covers selects against the
// manifest file, and the manifest against the members.
func (v *verifier) checkManifest(file string, covers func(string) bool) {
	text := v.tag(file)
	if text == nil {
		return
	}
	listed, err := parseManifest(text)
	if err != nil {
		v.problem(file, StatusAltered, err.Error())
		return
	}
	if m := v.byName[file]; m.status == "" && file == FileTagManifest {
		m.status = StatusOK // nothing lists the tag manifest, which is judged by what it lists
	}
	for _, m := range v.members {
		if m.typ == "dir" || !covers(m.name) || m.status == StatusDuplicate {
			continue
		}
		want, ok := listed[m.name]
		switch {
		case !ok:
			v.problem(m.name, StatusAdded, fmt.Sprintf("a %s %s does not list", m.typ, file))
		case m.typ != "file":
			v.problem(m.name, StatusAltered, fmt.Sprintf("a %s, %s lists a file", m.typ, file))
		case m.sha256 != want:
			v.problem(m.name, StatusAltered, fmt.Sprintf("SHA-256 %s, %s says %s", m.sha256, file, want))
		case m.status == "":
			m.status = StatusOK
		}
	}
	names := make([]string, 0, len(listed))
	for name := range listed {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if !covers(name) {
			v.problem(file, StatusAltered, fmt.Sprintf("lists %q, which it does not cover", name))
		} else if v.byName[name] == nil {
			v.missing(name, fmt.Sprintf("listed in %s, absent from the bag", file))
		}
	}
}

// checkOxum compares bag-info.txt's Payload-Oxum with the payload.
func (v *verifier) checkOxum() {
	info := v.byName[FileBagInfo]
	if info == nil || info.typ != "file" {
		v.missing(FileBagInfo, FileBagInfo+" missing")
		return
	}
	octets, count, ok := payloadOxum(info.data)
	var haveOctets, haveCount int64
	for _, m := range v.members {
		if m.typ == "file" && strings.HasPrefix(m.name, DirPayload+"/") {
			haveOctets += m.size
			haveCount++
		}
	}
	switch {
	case !ok:
		v.problem(FileBagInfo, StatusAltered, "no readable Payload-Oxum")
	case octets != haveOctets || count != haveCount:
		v.problem(FileBagInfo, StatusAltered, fmt.Sprintf("Payload-Oxum %d.%d, the payload is %d.%d", octets, count, haveOctets, haveCount))
	}
}

// checkStatement reads the envelope (or the unsigned statement), checks the
// signature with the key the statement names and, when given, the trusted
// key, then the subjects, the findings' digest and the store's proofs.
func (v *verifier) checkStatement(trusted ed25519.PublicKey) {
	env, plain := v.byName[FileEnvelope], v.byName[FileStatement]
	var statement []byte
	switch {
	case env != nil && plain != nil:
		v.problem(FileStatement, StatusAdded, "a bag holds either a signed envelope or an unsigned statement, not both")
		return
	case env != nil:
		v.rep.Signature.Signed = true
		var err error
		if statement, err = envelopePayload(env.data); err != nil {
			v.problem(FileEnvelope, StatusAltered, err.Error())
			return
		}
	case plain != nil:
		statement = bytes.TrimSuffix(plain.data, []byte("\n"))
		if trusted != nil {
			v.missing(FileEnvelope, "the bundle is not signed, and a public key was given to check it with")
		}
	default:
		v.missing(FileEnvelope, "neither a signed statement ("+FileEnvelope+") nor an unsigned one ("+FileStatement+")")
		return
	}
	subjects, pred, err := parseStatement(statement)
	if err != nil {
		name := FileStatement
		if env != nil {
			name = FileEnvelope
		}
		v.problem(name, StatusAltered, err.Error())
		return
	}
	v.rep.Predicate, v.subjects = pred, subjects
	if env != nil {
		v.checkSignature(env, pred, trusted)
	} else if pred.Signer != nil {
		v.problem(FileStatement, StatusAltered, "the statement names a signer, and the bag holds no signed envelope")
	}
	v.checkSubjects()
	if m := v.byName[DirPayload+"/"+FileFindings]; m == nil || m.sha256 != pred.FindingsSHA256 {
		v.problem(DirPayload+"/"+FileFindings, StatusAltered, "its SHA-256 is not the findings digest the statement records")
	}
	v.checkStore(pred)
}

// envelopePayload decodes the envelope's payload without trusting it yet,
// since the key that checks it is named inside.
func envelopePayload(b []byte) ([]byte, error) {
	statement, _, err := openEnvelope(b, nil)
	return statement, err
}

func (v *verifier) checkSignature(env *member, pred *Predicate, trusted ed25519.PublicKey) {
	st := &v.rep.Signature
	if pred.Signer == nil {
		v.problem(FileEnvelope, StatusAltered, "the statement names no signer key")
		return
	}
	st.PublicKey, st.KeyID = pred.Signer.PublicKey, pred.Signer.KeyID
	key, err := base64.StdEncoding.DecodeString(pred.Signer.PublicKey)
	if pred.Signer.Algorithm != "ed25519" || err != nil || len(key) != ed25519.PublicKeySize || KeyID(key) != pred.Signer.KeyID {
		v.problem(FileEnvelope, StatusAltered, "its signer is not a valid ed25519 public key with its keyid")
		return
	}
	if _, sigErr, err := openEnvelope(env.data, key); err != nil || sigErr != nil {
		v.problem(FileEnvelope, StatusAltered, fmt.Sprintf("the envelope's signature does not verify (%v): the statement or its signature was altered", errors.Join(err, sigErr)))
		return
	}
	st.Valid = true
	env.status = StatusOK
	if trusted != nil {
		if !bytes.Equal(key, trusted) {
			v.problem(FileEnvelope, "wrong key", fmt.Sprintf("signed by key %s, not by the given key %s", pred.Signer.KeyID, KeyID(trusted)))
			return
		}
		st.Trusted = true
	}
}

// checkSubjects compares the statement's subjects with the payload files.
func (v *verifier) checkSubjects() {
	for _, m := range v.members {
		if m.typ != "file" || !strings.HasPrefix(m.name, DirPayload+"/") || m.status == StatusDuplicate {
			continue
		}
		want, ok := v.subjects[m.name]
		switch {
		case !ok:
			v.problem(m.name, StatusAdded, "not a subject of the statement")
		case want != m.sha256:
			v.problem(m.name, StatusAltered, fmt.Sprintf("SHA-256 %s, the statement says %s", m.sha256, want))
		}
	}
	names := make([]string, 0, len(v.subjects))
	for name := range v.subjects {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if v.byName[name] == nil && !v.isRemoved(name) {
			v.missing(name, "a subject of the statement, absent from the bag")
		}
	}
}

func (v *verifier) isRemoved(name string) bool {
	for _, e := range v.removed {
		if e.Name == name {
			return true
		}
	}
	return false
}

// checkStore checks that each inclusion proof of the two snapshots in the
// store's evidence holds at the checkpoint's head, and that the checkpoint
// is signed by the bundle's signer when the bundle is signed.
func (v *verifier) checkStore(pred *Predicate) {
	ev := pred.Store
	if ev == nil {
		return
	}
	var key ed25519.PublicKey
	if v.rep.Signature.Valid {
		key, _ = base64.StdEncoding.DecodeString(pred.Signer.PublicKey)
	}
	head, verified, err := tlog.ParseCheckpoint([]byte(ev.Checkpoint), key)
	if err != nil {
		v.problem("store checkpoint", StatusAltered, err.Error())
		return
	}
	if key != nil && !verified {
		v.problem("store checkpoint", StatusAltered, "not signed by the bundle's key")
		return
	}
	for _, p := range ev.Inclusion {
		if p.Snapshot != pred.Before.ID && p.Snapshot != pred.After.ID {
			v.problem("store inclusion", StatusAdded, fmt.Sprintf("a proof of snapshot %s, neither of the bundle's", p.Snapshot))
			return
		}
		if p.Head.Size != head.Size || !bytes.Equal(p.Head.Root, head.Root) {
			v.problem("store inclusion", StatusAltered, fmt.Sprintf("snapshot %s is proved at another head than the checkpoint's", p.Snapshot))
			return
		}
		if err := p.Verify(); err != nil {
			v.problem("store inclusion", StatusAltered, err.Error())
			return
		}
		file := DirPayload + "/" + FileAfter
		if p.Snapshot == pred.Before.ID {
			file = DirPayload + "/" + FileBefore
		}
		if !v.matchesLeaf(file, p) {
			return
		}
	}
	v.rep.StoreProved = len(ev.Inclusion) > 0
}

// matchesLeaf checks that the bag's snapshot file is the snapshot p's leaf
// recorded, that is, that its digest (tlog.Digest) is the leaf's.
func (v *verifier) matchesLeaf(file string, p tlog.InclusionProof) bool {
	m := v.byName[file]
	if m == nil || m.typ != "file" {
		return false // named as removed by the manifests
	}
	if m.data == nil && m.size > 0 {
		v.rep.StoreNote = fmt.Sprintf("%s is over %d MiB: not checked against its leaf", file, maxSnapshotKeep>>20)
		return false
	}
	var snap snapshot.Snapshot
	if err := json.Unmarshal(m.data, &snap); err != nil {
		v.problem(file, StatusAltered, "not a snapshot: "+err.Error())
		return false
	}
	leaf, _ := tlog.ParseLeaf([]byte(p.Leaf)) // p.Verify parsed it
	d, err := tlog.Digest(&snap)
	if err != nil || snap.ID != p.Snapshot || d != leaf.Snapshots[0].Digest {
		v.problem(file, StatusAltered, fmt.Sprintf("not the snapshot leaf %d of the store's log recorded (digest %s, the leaf's %s)", p.LeafIndex, d, leaf.Snapshots[0].Digest))
		return false
	}
	return true
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
		if _, rest, ok := strings.Cut(m.name, "/"); m.typ == "file" && ok && !kept[m.name] && keepLimit(rest) > 0 {
			// A second copy of a name is hashed, not kept, since it is a
			// duplicate that no one trusts.
			kept[m.name] = true
			switch {
			case isTag(rest) && hdr.Size > smallLimit:
				return nil, false, fmt.Errorf("%w: %s is over %d MiB", ErrUnreadable, hdr.Name, smallLimit>>20)
			case hdr.Size <= keepLimit(rest):
				w = io.MultiWriter(h, &keep)
			}
		}
		n, err := io.Copy(w, src)
		if err != nil {
			return nil, false, fmt.Errorf("%w: %s: %v", ErrUnreadable, hdr.Name, err)
		}
		m.size, m.sha256, m.data = n, hex.EncodeToString(h.Sum(nil)), keep.Bytes()
		members = append(members, m)
	}
	// What follows the tar's end is read to check the gzip checksum, within
	// what is left of the budget, since a stream of zeros after it could be
	// endless.
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

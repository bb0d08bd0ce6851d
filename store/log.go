package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/transparency-dev/merkle/compact"
	"github.com/transparency-dev/merkle/rfc6962"
	bolt "go.etcd.io/bbolt"

	"github.com/gpusnap/gpusnap/snapshot"
)

// The store's log is an RFC 6962 Merkle tree with one leaf per change (a
// snapshot stored, removed or pruned, a diff or check result). The log bucket
// maps an 8-byte big-endian index to the leaf's text. The info bucket keeps
// the tree's right border, so an append hashes O(log n) nodes; docs/store.md
// has the leaf format.
var (
	bucketLog    = []byte("log")
	keyLogOrigin = []byte("log-origin")
	keyLogTree   = []byte("log-tree")
)

// Leaf operations.
const (
	OpPut    = "put"    // a snapshot stored
	OpAdopt  = "adopt"  // a snapshot found stored when the log began
	OpRemove = "remove" // gpusnap rm
	OpPrune  = "prune"  // gpusnap prune: every snapshot it removed
	OpResult = "result" // a diff's or check's findings
)

// leafHeader opens every leaf's text; a leaf of another version is refused.
const leafHeader = "gpusnap-log-leaf/1"

var hasher = rfc6962.DefaultHasher

var rangeFactory = &compact.RangeFactory{Hash: hasher.HashChildren}

// Leaf is one entry of the log.
type Leaf struct {
	Index uint64
	Op    string
	// Snapshots are the snapshots the leaf stores or removes, each with its
	// digest (SnapshotDigest); a result names those it compared.
	Snapshots []LeafSnapshot
	// Command and Findings are a result's: "diff" or "check", and the
	// SHA-256 of its findings' JSON.
	Command, Findings string
	// Events are a result's seals of the event log its window read: where
	// each segment's hash chain stood then, so that a segment removed or
	// rewritten after the fact no longer matches (VerifyLog reports them
	// for the caller to check, LogReport.Seals).
	Events []EventSeal
}

// EventSeal is where one segment of the event log stood when a result was
// recorded: its file name, and its line, seq and hash (hex SHA-256) of the
// last chained record read.
type EventSeal struct {
	Segment string
	Line    int
	Seq     uint64
	Hash    string
}

// LeafSnapshot names one snapshot in a leaf.
type LeafSnapshot struct {
	ID     string
	Digest string // hex SHA-256; empty in a result for a snapshot not stored
}

// Marshal writes the leaf's text: a header line, then one "key value" line
// each, ids quoted as Go quotes strings so no id can break a line.
func (l Leaf) Marshal() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s\nindex %d\nop %s\n", leafHeader, l.Index, l.Op)
	for _, s := range l.Snapshots {
		digest := s.Digest
		if digest == "" {
			digest = "-"
		}
		fmt.Fprintf(&b, "snapshot %s %s\n", strconv.QuoteToASCII(s.ID), digest)
	}
	if l.Command != "" {
		fmt.Fprintf(&b, "command %s\nfindings %s\n", l.Command, l.Findings)
	}
	for _, e := range l.Events {
		fmt.Fprintf(&b, "events %s %d %d %s\n", strconv.QuoteToASCII(e.Segment), e.Line, e.Seq, e.Hash)
	}
	return b.Bytes()
}

// ParseLeaf reads a leaf's text; it must be exactly what Marshal writes.
func ParseLeaf(text []byte) (Leaf, error) {
	var l Leaf
	lines := strings.Split(string(text), "\n")
	if len(lines) < 4 || lines[0] != leafHeader || lines[len(lines)-1] != "" {
		return l, errors.New("not a gpusnap log leaf")
	}
	for _, line := range lines[1 : len(lines)-1] {
		key, value, _ := strings.Cut(line, " ")
		var err error
		switch key {
		case "index":
			l.Index, err = strconv.ParseUint(value, 10, 64)
		case "op":
			l.Op = value
		case "snapshot":
			l.Snapshots, err = appendLeafSnapshot(l.Snapshots, value)
		case "command":
			l.Command = value
		case "findings":
			l.Findings = value
		case "events":
			l.Events, err = appendEventSeal(l.Events, value)
		default:
			err = fmt.Errorf("unknown line %q", key)
		}
		if err != nil {
			return l, fmt.Errorf("leaf: %w", err)
		}
	}
	if !bytes.Equal(l.Marshal(), text) {
		return l, errors.New("leaf: not in its canonical form")
	}
	return l, nil
}

func appendLeafSnapshot(out []LeafSnapshot, value string) ([]LeafSnapshot, error) {
	at := strings.LastIndexByte(value, ' ')
	if at < 0 {
		return out, fmt.Errorf("snapshot line %q", value)
	}
	id, err := strconv.Unquote(value[:at])
	if err != nil {
		return out, fmt.Errorf("snapshot id %s: %w", value[:at], err)
	}
	digest := value[at+1:]
	if digest == "-" {
		digest = ""
	}
	return append(out, LeafSnapshot{ID: id, Digest: digest}), nil
}

// appendEventSeal reads an events line: a quoted segment name, its line,
// seq and hash.
func appendEventSeal(out []EventSeal, value string) ([]EventSeal, error) {
	f := strings.Fields(value)
	if len(f) != 4 {
		return out, fmt.Errorf("events line %q", value)
	}
	seg, err := strconv.Unquote(f[0])
	if err != nil {
		return out, fmt.Errorf("events segment %s: %w", f[0], err)
	}
	line, err := strconv.Atoi(f[1])
	if err != nil {
		return out, fmt.Errorf("events line number %s: %w", f[1], err)
	}
	seq, err := strconv.ParseUint(f[2], 10, 64)
	if err != nil {
		return out, fmt.Errorf("events seq %s: %w", f[2], err)
	}
	return append(out, EventSeal{Segment: seg, Line: line, Seq: seq, Hash: f[3]}), nil
}

// LeafHash is the RFC 6962 hash of a leaf's text: SHA-256 of 0x00 || text.
func LeafHash(text []byte) []byte { return hasher.HashLeaf(text) }

// TreeHead is the log's size and root.
type TreeHead struct {
	Origin string `json:"origin"`
	Size   uint64 `json:"size"`
	Root   []byte `json:"root"` // RFC 6962 root hash; base64 in JSON
}

// SnapshotDigest is the digest a leaf records of a stored snapshot: the
// lower-case hex SHA-256 of this text.
//
//	gpusnap-snapshot/1
//	meta SHA-256(meta JSON)
//	header SHA-256(header JSON)
//	processes N            ("processes null" for a nil list)
//	SHA-256(process JSON)  one line each, in order
//
// The JSON is json.Marshal's, of the Meta, the snapshot without processes and
// each process.
func SnapshotDigest(meta, header []byte, procSums [][sha256.Size]byte, procsNil bool) string {
	h := sha256.New()
	m, hd := sha256.Sum256(meta), sha256.Sum256(header)
	fmt.Fprintf(h, "gpusnap-snapshot/1\nmeta %x\nheader %x\n", m, hd)
	if procsNil {
		fmt.Fprint(h, "processes null\n")
	} else {
		fmt.Fprintf(h, "processes %d\n", len(procSums))
	}
	// Lines are hashed 64 at a time: a write a line cost a third more
	// (the digest of 5,000 processes).
	const line = 2*sha256.Size + 1
	var block [64 * line]byte
	for len(procSums) > 0 {
		n := min(len(procSums), 64)
		for i, s := range procSums[:n] {
			hex.Encode(block[i*line:], s[:])
			block[i*line+line-1] = '\n'
		}
		h.Write(block[:n*line])
		procSums = procSums[n:]
	}
	return hex.EncodeToString(h.Sum(nil))
}

// logState is the log's border, read and written in a transaction.
type logState struct {
	origin string
	rng    *compact.Range
	leaves *bolt.Bucket
	info   *bolt.Bucket
}

// openLog reads the log's state; a store written before the log began gets
// its log here, one adopt leaf for each snapshot it holds, in id order.
func (s *Store) openLog(tx *bolt.Tx) (*logState, error) {
	info := tx.Bucket(bucketInfo)
	if info == nil {
		return nil, s.damaged("bucket %s is missing", bucketInfo)
	}
	leaves, err := tx.CreateBucketIfNotExists(bucketLog)
	if err != nil {
		return nil, err
	}
	leaves.FillPercent = fillSequential
	st := &logState{origin: string(info.Get(keyLogOrigin)), leaves: leaves, info: info}
	if st.origin != "" {
		st.rng, err = decodeRange(info.Get(keyLogTree))
		if err != nil {
			return nil, s.damaged("log tree: %v", err)
		}
		return st, nil
	}
	if k, _ := leaves.Cursor().First(); k != nil {
		return nil, s.damaged("the log has leaves but no origin")
	}
	st.origin, st.rng = Origin(hostID()), rangeFactory.NewEmptyRange(0)
	if err := info.Put(keyLogOrigin, []byte(st.origin)); err != nil {
		return nil, err
	}
	return st, s.adopt(tx, st)
}

// adopt appends a leaf for every snapshot already stored.
func (s *Store) adopt(tx *bolt.Tx, st *logState) error {
	b, err := s.buckets(tx, bucketMeta)
	if err != nil {
		return err
	}
	var ids []string
	_ = b[0].ForEach(func(k, _ []byte) error { ids = append(ids, string(k)); return nil })
	for _, id := range ids {
		digest, err := s.storedDigest(tx, id, nil)
		if err != nil {
			return err
		}
		if err := st.append(Leaf{Op: OpAdopt, Snapshots: []LeafSnapshot{{ID: id, Digest: digest}}}); err != nil {
			return err
		}
	}
	return nil
}

// append adds a leaf at the end of the log and stores the new border.
func (st *logState) append(l Leaf) error {
	l.Index = st.rng.End()
	text := l.Marshal()
	if err := st.rng.Append(LeafHash(text), nil); err != nil {
		return err
	}
	if err := st.leaves.Put(seqKey(l.Index), text); err != nil {
		return err
	}
	return st.info.Put(keyLogTree, encodeRange(st.rng))
}

func (st *logState) head() (TreeHead, error) {
	root, err := st.rng.GetRootHash(nil)
	if err != nil {
		return TreeHead{}, err
	}
	return TreeHead{Origin: st.origin, Size: st.rng.End(), Root: root}, nil
}

// AppendResult records a diff's or check's result as a leaf and returns the
// log's new head. snapshots are those it compared (an id with an empty
// digest: not stored); findings is the SHA-256 (hex) of its findings' JSON;
// events seal the event log's segments its window read.
func (s *Store) AppendResult(command, findings string, events []EventSeal, ids ...string) (TreeHead, error) {
	var head TreeHead
	err := s.update(func(tx *bolt.Tx) error {
		st, err := s.openLog(tx)
		if err != nil {
			return err
		}
		l := Leaf{Op: OpResult, Command: command, Findings: findings, Events: events}
		meta := tx.Bucket(bucketMeta)
		for _, id := range ids {
			ref := LeafSnapshot{ID: id}
			if meta.Get([]byte(id)) != nil {
				if ref.Digest, err = s.storedDigest(tx, id, nil); err != nil {
					return err
				}
			}
			l.Snapshots = append(l.Snapshots, ref)
		}
		if err := st.append(l); err != nil {
			return err
		}
		head, err = st.head()
		return err
	})
	return head, err
}

// Head returns the log's origin, size and root; a store whose log has not
// begun has size 0 and the empty tree's root.
func (s *Store) Head() (TreeHead, error) {
	var head TreeHead
	err := s.view(func(tx *bolt.Tx) error {
		info := tx.Bucket(bucketInfo)
		if info == nil || info.Get(keyLogOrigin) == nil {
			head = TreeHead{Origin: Origin(hostID()), Root: hasher.EmptyRoot()}
			return nil
		}
		rng, err := decodeRange(info.Get(keyLogTree))
		if err != nil {
			return s.damaged("log tree: %v", err)
		}
		root, err := rng.GetRootHash(nil)
		head = TreeHead{Origin: string(info.Get(keyLogOrigin)), Size: rng.End(), Root: root}
		return err
	})
	return head, err
}

// storedDigest computes SnapshotDigest of stored snapshot id from its
// records. checked, when not nil, remembers the process records whose JSON
// was already checked against its hash, so each is hashed once.
func (s *Store) storedDigest(tx *bolt.Tx, id string, checked map[uint64]bool) (string, error) {
	b, err := s.buckets(tx, bucketMeta, bucketSnapshots, bucketRefs, bucketProcs)
	if err != nil {
		return "", err
	}
	key := []byte(id)
	mv, hv, rv := b[0].Get(key), b[1].Get(key), b[2].Get(key)
	if mv == nil || hv == nil || rv == nil {
		return "", s.damaged("snapshot %s: its records are missing", id)
	}
	header, err := decompress(hv, maxHeaderSize)
	if err != nil {
		return "", s.damaged("snapshot %s: %v", id, err)
	}
	seqs, isNil, err := decodeRefs(rv)
	if err != nil {
		return "", s.damaged("snapshot %s: %v", id, err)
	}
	sums := make([][sha256.Size]byte, len(seqs))
	recs := newRecords(tx, b[3])
	for i, seq := range seqs {
		v := recs.value(seq)
		if len(v) < sha256.Size {
			return "", s.damaged("snapshot %s: process record %d is missing", id, seq)
		}
		sums[i] = [sha256.Size]byte(v[:sha256.Size])
		if checked == nil || checked[seq] {
			continue
		}
		// The record's JSON, as stored or as its binary form marshals,
		// must still hash to what the leaf's digest was made of.
		if rec, err := recs.parse(v); err != nil {
			return "", s.damaged("snapshot %s: process record %d was changed: %v", id, seq, err)
		} else if _, err := rec.marshalJSON(); err != nil {
			return "", s.damaged("snapshot %s: process record %d was changed: %v", id, seq, err)
		}
		checked[seq] = true
	}
	return SnapshotDigest(mv, header, sums, isNil), nil
}

// Origin is the log's origin line for a host: gpusnap/<host id>.
func Origin(host string) string { return "gpusnap/" + host }

// hostID names this host in the log's origin: its hostname, with anything
// a note's key name cannot hold (space, +, control bytes) as '-'.
func hostID() string {
	name, err := os.Hostname()
	if err != nil || name == "" {
		name = "unknown"
	}
	return strings.Map(func(r rune) rune {
		if r <= ' ' || r == '+' || r > '~' {
			return '-'
		}
		return r
	}, name)
}

// encodeRange writes the border: the size (8 bytes), then its hashes.
func encodeRange(r *compact.Range) []byte {
	out := binary.BigEndian.AppendUint64(nil, r.End())
	for _, h := range r.Hashes() {
		out = append(out, h...)
	}
	return out
}

func decodeRange(v []byte) (*compact.Range, error) {
	if len(v) < 8 || (len(v)-8)%sha256.Size != 0 {
		return nil, fmt.Errorf("%d bytes", len(v))
	}
	size := binary.BigEndian.Uint64(v)
	var hashes [][]byte
	for p := v[8:]; len(p) > 0; p = p[sha256.Size:] {
		hashes = append(hashes, bytes.Clone(p[:sha256.Size]))
	}
	return rangeFactory.NewRange(0, size, hashes)
}

// Digest is SnapshotDigest of snap as Put stores it: what a leaf records of
// it. A copy of a snapshot (a bundle's before.json, read back) has the
// digest of its leaf exactly when its content is what was stored.
func Digest(snap *snapshot.Snapshot) (string, error) {
	header := *snap
	header.Processes = nil
	hb, err := json.Marshal(&header)
	if err != nil {
		return "", err
	}
	mb, err := json.Marshal(metaOf(snap))
	if err != nil {
		return "", err
	}
	sums := make([][sha256.Size]byte, len(snap.Processes))
	for i := range snap.Processes {
		b, err := json.Marshal(&snap.Processes[i])
		if err != nil {
			return "", err
		}
		sums[i] = sha256.Sum256(b)
	}
	return SnapshotDigest(mb, hb, sums, snap.Processes == nil), nil
}

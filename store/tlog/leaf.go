// Package tlog is the format of the store's log. It defines the leaves, the
// digest a leaf records of a snapshot, inclusion proofs and signed
// checkpoints. It
// holds no storage, so a bundle verifies a log's proofs without linking
// the store (docs/store.md has the format).
package tlog

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/transparency-dev/merkle/rfc6962"

	"github.com/gpusnap/gpusnap/snapshot"
)

// Leaf operations.
const (
	OpPut    = "put"    // a snapshot stored
	OpAdopt  = "adopt"  // a snapshot found stored when the log began
	OpRemove = "remove" // gpusnap rm
	OpPrune  = "prune"  // every snapshot one gpusnap prune removed
	OpResult = "result" // a diff's or check's findings
)

// leafHeader opens every leaf's text. A leaf of another version is refused.
const leafHeader = "gpusnap-log-leaf/1"

// Hasher is the log's RFC 6962 hasher, SHA-256.
var Hasher = rfc6962.DefaultHasher

// Leaf is one entry of the log.
type Leaf struct {
	Index uint64
	Op    string
	// Snapshots are the snapshots the leaf stores or removes, each with its
	// digest (SnapshotDigest). A result names those it compared.
	Snapshots []LeafSnapshot
	// Command ("diff" or "check") and Findings (the SHA-256 of the
	// findings' JSON) belong to a result.
	Command, Findings string
	// Events are a result's seals of the event log its window read. They
	// say where each segment's hash chain stood then, so that a segment
	// removed or rewritten after the fact no longer matches (the store's
	// VerifyLog reports them for the caller to check).
	Events []EventSeal
}

// EventSeal is where one segment of the event log stood when a result was
// recorded. It names the segment's file, and the line, seq and hash (hex
// SHA-256) of the last chained record read.
type EventSeal struct {
	Segment string
	Line    int
	Seq     uint64
	Hash    string
}

// LeafSnapshot names one snapshot in a leaf.
type LeafSnapshot struct {
	ID     string
	Digest string // hex SHA-256, empty in a result for a snapshot not stored
}

// Marshal writes the leaf's text, a header line and then one "key value"
// line each. Ids are quoted as Go quotes strings, so no id can break a line.
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

// ParseLeaf reads a leaf's text, which must be exactly what Marshal writes.
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

// appendEventSeal reads an events line, a quoted segment name and then its
// line, seq and hash. The name is read as a quoted string first, since
// Marshal quotes any name, one with a space included.
func appendEventSeal(out []EventSeal, value string) ([]EventSeal, error) {
	quoted, err := strconv.QuotedPrefix(value)
	if err != nil {
		return out, fmt.Errorf("events segment in %q: %w", value, err)
	}
	seg, _ := strconv.Unquote(quoted) // QuotedPrefix read it as one
	f := strings.Fields(value[len(quoted):])
	if len(f) != 3 {
		return out, fmt.Errorf("events line %q", value)
	}
	line, err := strconv.Atoi(f[0])
	if err != nil {
		return out, fmt.Errorf("events line number %s: %w", f[0], err)
	}
	seq, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return out, fmt.Errorf("events seq %s: %w", f[1], err)
	}
	return append(out, EventSeal{Segment: seg, Line: line, Seq: seq, Hash: f[2]}), nil
}

// LeafHash is the RFC 6962 hash of a leaf's text, SHA-256 of 0x00 || text.
func LeafHash(text []byte) []byte { return Hasher.HashLeaf(text) }

// TreeHead is the log's size and root.
type TreeHead struct {
	Origin string `json:"origin"`
	Size   uint64 `json:"size"`
	Root   []byte `json:"root"` // RFC 6962 root hash, base64 in JSON
}

// SnapshotDigest is the digest a leaf records of a stored snapshot, the
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
	// Lines are hashed 64 at a time, which writes to the hash far less
	// often than a line at a time.
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

// Origin is the log's origin line for a host, gpusnap/<host id>.
func Origin(host string) string { return "gpusnap/" + host }

// Meta describes a stored snapshot without loading it.
type Meta struct {
	ID     string    `json:"id"`
	Label  string    `json:"label"`
	Tenant string    `json:"tenant"`
	Host   string    `json:"host"`
	Time   time.Time `json:"time"`
}

// MetaOf is what the store lists of a snapshot.
func MetaOf(snap *snapshot.Snapshot) Meta {
	return Meta{ID: snap.ID, Label: snap.Label, Tenant: snap.Tenant, Host: snap.Host.Hostname, Time: snap.Host.CaptureStart.UTC()}
}

// Digest is SnapshotDigest of snap as the store stores it, which a leaf
// records of it. A copy of a snapshot (a bundle's before.json, read back) has the
// digest of its leaf exactly when its content is what was stored.
func Digest(snap *snapshot.Snapshot) (string, error) {
	header := *snap
	header.Processes = nil
	hb, err := json.Marshal(&header)
	if err != nil {
		return "", err
	}
	mb, err := json.Marshal(MetaOf(snap))
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

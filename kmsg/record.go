// Package kmsg reads the kernel log in /dev/kmsg's format with its own small
// parser. It tells where the log stands and reads the records of a window
// between two snapshots, opening the device read-only and non-blocking.
//
// A record (Documentation/ABI/testing/dev-kmsg) is
//
//	PRI,SEQ,USEC,FLAGS[,FIELD...];TEXT
//
// where TEXT escapes bytes outside 0x20-0x7e, and the backslash, as \xNN.
// Lines after it starting with a space are its dictionary.
package kmsg

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"unsafe"
)

// FacilityKern is the facility of records the kernel wrote itself. A record
// written to /dev/kmsg from user space never has it, as the kernel gives
// such a record LOG_USER (1) unless the writer names another non-zero
// facility.
const FacilityKern = 0

// MaxText bounds the text of one record (and its dictionary) that is kept.
// The kernel's own records are far shorter, but a file given with --kmsg may
// not be.
const MaxText = 64 << 10

// Record is one record of the kernel log. A window holds thousands, so the
// fields few records carry are behind Cut to keep each small.
type Record struct {
	Seq      uint64   `json:"seq"`
	USec     uint64   `json:"usec"`     // microseconds since boot (the kernel's local clock)
	Facility int32    `json:"facility"` // PRI >> 3, where 0 is the kernel
	Level    int32    `json:"level"`    // PRI & 7, from 0 emerg to 7 debug
	Flags    string   `json:"flags"`
	Caller   string   `json:"caller,omitempty"` // caller=T123 or C1, where the kernel adds it
	Text     string   `json:"text"`             // escaped as the kernel escapes it
	Dict     []string `json:"dict,omitempty"`   // KEY=VALUE continuation lines, without the leading space
	Cut      *Cut     `json:"cut,omitempty"`    // set where the text was longer than MaxText
}

// Cut describes a text longer than MaxText, of which only the first MaxText
// bytes are kept.
type Cut struct {
	TextLen    int    `json:"text_len"`
	TextSHA256 string `json:"text_sha256"`
}

// Line writes the record back in /dev/kmsg's format, dictionary included,
// ending in a newline. A bundle keeps it as the raw record.
func (r *Record) Line() string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%d,%d,%d,%s", r.Facility<<3|r.Level, r.Seq, r.USec, r.Flags)
	if r.Caller != "" {
		b.WriteString(",caller=" + r.Caller)
	}
	b.WriteByte(';')
	b.WriteString(r.Text)
	b.WriteByte('\n')
	for _, d := range r.Dict {
		b.WriteByte(' ')
		b.WriteString(d)
		b.WriteByte('\n')
	}
	return b.String()
}

// errNotRecord is wrapped by every parse error.
var errNotRecord = errors.New("not a kernel log record")

// parseSeq reads the sequence number alone, so skipping the records before
// a window costs this much per record, not a whole parse.
func parseSeq(header []byte) (uint64, error) {
	_, rest := cutComma(header)
	seq, rest := cutComma(rest)
	if rest == nil {
		return 0, errNotRecord
	}
	return parseUint(seq)
}

// cutComma cuts b at its first comma, with rest nil where it has none. A
// header's fields are a few bytes long, and a plain loop finds the comma
// faster there than a call to bytes.IndexByte.
func cutComma(b []byte) (field, rest []byte) {
	for i, c := range b {
		if c == ',' {
			return b[:i], b[i+1:]
		}
	}
	return b, nil
}

// parseUint is strconv.ParseUint for a []byte, without the allocation of a string.
func parseUint(b []byte) (uint64, error) {
	if len(b) == 0 || len(b) > 20 {
		return 0, errNotRecord
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, errNotRecord
		}
		d := uint64(c - '0')
		if n > (1<<64-1-d)/10 {
			return 0, errNotRecord
		}
		n = n*10 + d
	}
	return n, nil
}

// Parse reads one record from its first line (header and text, without the
// newline) and its dictionary lines (each without the leading space and the
// newline).
func Parse(first []byte, dict [][]byte) (Record, error) {
	var r Record
	err := parse(&r, first, dict, nil)
	return r, err
}

// parse is Parse into *r, a zero Record (a window's records are parsed in
// place), with the text and dictionary kept in a (each its own string
// where a is nil).
func parse(r *Record, first []byte, dict [][]byte, a *textArena) error {
	semi := bytes.IndexByte(first, ';')
	if semi < 0 {
		return fmt.Errorf("%w: no ';' after the header", errNotRecord)
	}
	// PRI,SEQ,USEC,FLAGS, then extensions, which the ABI says to ignore where not known.
	header := first[:semi]
	var fields [4][]byte
	for i := range fields {
		if header == nil {
			return fmt.Errorf("%w: header %q has fewer than 4 fields", errNotRecord, clip(first[:semi]))
		}
		fields[i], header = cutComma(header)
	}
	pri, err := parseUint(fields[0])
	if err != nil || pri > 1<<31 {
		return fmt.Errorf("%w: priority %q", errNotRecord, clip(fields[0]))
	}
	if r.Seq, err = parseUint(fields[1]); err != nil {
		return fmt.Errorf("%w: sequence number %q", errNotRecord, clip(fields[1]))
	}
	if r.USec, err = parseUint(fields[2]); err != nil {
		return fmt.Errorf("%w: timestamp %q", errNotRecord, clip(fields[2]))
	}
	r.Facility, r.Level = int32(pri>>3), int32(pri&7)
	r.Flags = "-" // the flags of nearly every record, with no string to allocate
	if string(fields[3]) != "-" {
		r.Flags = string(clip(fields[3]))
	}
	for len(header) > 0 {
		var f []byte
		f, header = cutComma(header)
		if v, ok := bytes.CutPrefix(f, []byte("caller=")); ok {
			r.Caller = a.text(clip(v))
		}
	}
	text := first[semi+1:]
	if len(text) > MaxText {
		sum := sha256.Sum256(text)
		r.Cut = &Cut{TextLen: len(text), TextSHA256: hex.EncodeToString(sum[:])}
		text = text[:MaxText]
	}
	r.Text = a.text(text)
	kept := len(text)
	if len(dict) > 0 {
		r.Dict = a.dict(len(dict))
	}
	for _, d := range dict {
		if kept+len(d) > MaxText {
			break // the text's bound covers its dictionary too
		}
		kept += len(d)
		r.Dict = append(r.Dict, a.text(d))
	}
	return nil
}

// arenaBlock is the size of a textArena's blocks, and arenaLines the number
// of dictionary lines one allocation holds.
const arenaBlock, arenaLines = 32 << 10, 1024

// textArena keeps the texts of a window's records. Each is copied once into
// a block that is only ever appended to, and is a string over those bytes,
// never written again. A window of records costs an allocation per block,
// not one per text and dictionary line (most of what reading a window
// cost).
type textArena struct {
	block    []byte
	dictRoom []string
}

// text keeps b. A nil arena makes a string of its own.
func (a *textArena) text(b []byte) string {
	if a == nil {
		return string(b)
	}
	if len(b) == 0 {
		return ""
	}
	if cap(a.block)-len(a.block) < len(b) {
		a.block = make([]byte, 0, max(arenaBlock, len(b)))
	}
	at := len(a.block)
	a.block = append(a.block, b...)
	return unsafe.String(&a.block[at], len(b))
}

// dict gives an empty slice with room for n dictionary lines, its own.
func (a *textArena) dict(n int) []string {
	if a == nil {
		return make([]string, 0, n)
	}
	if cap(a.dictRoom)-len(a.dictRoom) < n {
		a.dictRoom = make([]string, 0, max(arenaLines, n))
	}
	at := len(a.dictRoom)
	a.dictRoom = a.dictRoom[:at+n]
	return a.dictRoom[at : at : at+n]
}

// clip bounds a header field quoted in an error or kept as a flag.
func clip(b []byte) []byte {
	if len(b) > 32 {
		return b[:32]
	}
	return b
}

package safetext

import (
	"bytes"
	"fmt"
	"io"
	"unicode/utf8"
)

// JSONWriter wraps w, which receives JSON, so every bidirectional control
// character (U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069) is written
// as its \uXXXX escape. A JSON reader decodes the same string, but a
// terminal, pager or SIEM showing the raw text is no longer reordered by a
// process name holding U+202E. JSON has non-ASCII only in strings, where
// escapes are valid.
func JSONWriter(w io.Writer) io.Writer { return &bidiWriter{w: w} }

type bidiWriter struct {
	w     io.Writer
	carry []byte // the start of a rune cut by the end of the last write
	out   []byte
}

// The first bytes of the bidi characters' UTF-8 encodings. U+061C is D8 9C,
// and the others are E2 80 or E2 81 and a third byte.
const bidiLeadArabic, bidiLeadPunct = 0xd8, 0xe2

// nextBidiLead is the index of the first byte of p that can start a bidi
// character, or -1.
func nextBidiLead(p []byte) int {
	a, b := bytes.IndexByte(p, bidiLeadArabic), bytes.IndexByte(p, bidiLeadPunct)
	if a < 0 || b >= 0 && b < a {
		return b
	}
	return a
}

func isBidi(r rune) bool {
	return r == 0x061c || r == 0x200e || r == 0x200f || r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069
}

func (b *bidiWriter) Write(p []byte) (int, error) {
	data := p
	if len(b.carry) > 0 {
		data = append(b.carry, p...)
		b.carry = nil
	}
	// Keep back a rune cut at the end, which the next write completes.
	if n := incompleteTail(data); n > 0 {
		b.carry = append([]byte(nil), data[len(data)-n:]...)
		data = data[:len(data)-n]
	}
	next := nextBidiLead(data)
	if next < 0 {
		// With nothing to escape, data is written as given, without a copy.
		if _, err := b.w.Write(data); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	b.out = b.out[:0]
	for next >= 0 {
		// The bytes before a byte that may start a bidi character are
		// copied whole, since no other rune has such a byte in its middle.
		b.out = append(b.out, data[:next]...)
		r, size := utf8.DecodeRune(data[next:])
		if isBidi(r) {
			b.out = fmt.Appendf(b.out, `\u%04x`, r)
		} else {
			b.out = append(b.out, data[next:next+size]...)
		}
		data = data[next+size:]
		next = nextBidiLead(data)
	}
	b.out = append(b.out, data...)
	if _, err := b.w.Write(b.out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// incompleteTail is how many bytes at the end of p start a UTF-8 sequence
// that p does not finish (0 to 3).
func incompleteTail(p []byte) int {
	for n := 1; n <= 3 && n <= len(p); n++ {
		c := p[len(p)-n]
		if c < utf8.RuneSelf || utf8.RuneStart(c) {
			if c >= 0xc0 && !utf8.FullRune(p[len(p)-n:]) {
				return n
			}
			return 0
		}
	}
	return 0
}

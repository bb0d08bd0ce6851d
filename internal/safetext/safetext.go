// Package safetext makes text from processes safe to print on a terminal.
// Process names, command lines and paths are chosen by whoever started the
// process. A hostile one can carry newlines that forge report lines, escape
// sequences that rewrite the screen, or bytes that are not UTF-8.
package safetext

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Escape returns s with every control character, escape sequence introducer
// and invalid UTF-8 byte written as a visible Go-style escape (\n, \x1b,
// \xff, \u202e). Printable text, spaces included, is kept as it is, and a
// backslash is doubled so an escape in the output is never ambiguous.
func Escape(s string) string { return escape(s, true) }

// Line is Escape for a message that may already hold escapes of its own, such
// as an error that quoted its arguments with %q. Backslashes are kept as they
// are, so they are not doubled, and everything else Escape escapes still is.
func Line(s string) string { return escape(s, false) }

func escape(s string, backslash bool) string {
	if clean(s, backslash) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\' && backslash:
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x80 && !unicode.IsPrint(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case r >= 0x80 && !unicode.IsPrint(r) && r != ' ':
			// C1 controls, bidi overrides and other invisible runes.
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// clean reports whether s is printable ASCII (with no backslash, when
// backslashes are escaped). That is the common case, which needs no copy.
func clean(s string, backslash bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || (c == '\\' && backslash) {
			return false
		}
	}
	return true
}

// Join escapes each element and joins them with spaces, for a command line.
func Join(args []string) string {
	parts := make([]string, len(args))
	for i, a := range args {
		parts[i] = Escape(a)
	}
	return strings.Join(parts, " ")
}

// FromC is a NUL-terminated C char array (as cgo and BPF records carry
// them) as a Go string, the bytes before the first NUL or all of them.
func FromC(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}

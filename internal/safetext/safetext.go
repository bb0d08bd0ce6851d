// Package safetext makes text from processes safe to print on a terminal.
// Process names, command lines and paths are chosen by whoever started the
// process; a hostile one can carry newlines that forge report lines, escape
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
func Escape(s string) string {
	if clean(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\':
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

// clean reports whether s is printable ASCII with no backslash: the common
// case, which needs no copy.
func clean(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '\\' {
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

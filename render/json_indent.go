package render

import "bytes"

// appendIndent appends src, compact JSON as json.Marshal writes it (no
// space outside strings), to dst indented exactly as json.Indent(dst, src,
// prefix, "  ") would. json.Indent runs its full validating scanner over
// every byte (docs/performance.md, The store, has its cost), while this
// copies each string whole and looks only at the bytes between them. src
// must be valid.
func appendIndent(dst, src []byte, prefix string) []byte {
	depth := 0
	opened := false // after { or [ comes a newline, unless it closes at once
	for i := 0; i < len(src); i++ {
		c := src[i]
		if opened {
			opened = false
			if c == '}' || c == ']' {
				depth--
				dst = append(dst, c)
				continue
			}
			dst = appendNewline(dst, prefix, depth)
		}
		switch c {
		case '"':
			end := stringEnd(src, i)
			dst = append(dst, src[i:end]...)
			i = end - 1
		case '{', '[':
			dst = append(dst, c)
			depth++
			opened = true
		case ',':
			dst = append(dst, c)
			dst = appendNewline(dst, prefix, depth)
		case ':':
			dst = append(dst, ':', ' ')
		case '}', ']':
			depth--
			dst = appendNewline(dst, prefix, depth)
			dst = append(dst, c)
		default:
			dst = append(dst, c)
		}
	}
	return dst
}

func appendNewline(dst []byte, prefix string, depth int) []byte {
	dst = append(dst, '\n')
	dst = append(dst, prefix...)
	for range depth {
		dst = append(dst, ' ', ' ')
	}
	return dst
}

// stringEnd returns the index after the closing quote of the JSON string
// that opens at src[start].
func stringEnd(src []byte, start int) int {
	i := start + 1
	for {
		q := bytes.IndexByte(src[i:], '"')
		if q < 0 {
			return len(src)
		}
		// A quote is escaped if an odd number of backslashes precede it.
		j := i + q
		n := 0
		for k := j - 1; k > start && src[k] == '\\'; k-- {
			n++
		}
		if n%2 == 0 {
			return j + 1
		}
		i = j + 1
	}
}

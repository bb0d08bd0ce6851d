package scenariodir

import (
	"bytes"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ChangesFile names the file of a scenario in the compact form.
const ChangesFile = "changes"

// Sides are the hosts a scenario may hold, in the order the compact form
// derives them. A side's origin is a base or a side before it.
var Sides = []string{"before", "during", "after"}

// opKind is what one entry of a changes file does to its side.
type opKind int

const (
	opFile    opKind = iota // a file, its text on the lines below the marker
	opNoEOL                 // a file, the same but for the last newline
	opQuoted                // a file, its bytes as one Go string below the marker
	opLink                  // a link, its target as one Go string below the marker
	opRemoved               // the path and all below it are gone
)

// kindWords are the words a marker carries in parentheses after the path.
var kindWords = map[opKind]string{opNoEOL: "no final newline", opQuoted: "quoted", opLink: "link", opRemoved: "removed"}

// op is one entry of a changes file. path starts with its side's name.
type op struct {
	path string
	kind opKind
	e    entry
}

// side is one host of a compact scenario, its origin and its changes.
type side struct {
	name, origin string
	ops          []op
}

// header is a line that gives a side its origin.
var header = regexp.MustCompile(`^([a-z]+) from ([a-z][a-z0-9-]*)$`)

// marker is the line that starts an entry.
var marker = regexp.MustCompile(`^-- ([^ ()]+)(?: \((no final newline|quoted|link|removed)\))? --$`)

// parseChanges reads a changes file. Lines before the first entry are
// comments (#), blank, or a header, and each side is declared once with
// an origin that is a base's name or an earlier side.
func parseChanges(data []byte) ([]*side, error) {
	if len(data) > 0 && data[len(data)-1] != '\n' {
		return nil, fmt.Errorf("the last line has no newline")
	}
	lines := strings.SplitAfter(string(data), "\n")
	lines = lines[:len(lines)-1]
	bySide := map[string]*side{}
	var sides []*side
	i := 0
	for ; i < len(lines) && !strings.HasPrefix(lines[i], "-- "); i++ {
		line := strings.TrimSuffix(lines[i], "\n")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := header.FindStringSubmatch(line)
		if m == nil || !slices.Contains(Sides, m[1]) || bySide[m[1]] != nil {
			return nil, fmt.Errorf("line %d: %q is not a new side's header (SIDE from ORIGIN)", i+1, line)
		}
		if slices.Contains(Sides, m[2]) && bySide[m[2]] == nil {
			return nil, fmt.Errorf("line %d: %s comes from %s, which no line above declares", i+1, m[1], m[2])
		}
		bySide[m[1]] = &side{name: m[1], origin: m[2]}
		sides = append(sides, bySide[m[1]])
	}
	for i < len(lines) {
		o, next, err := parseEntry(lines, i)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		s := bySide[strings.SplitN(o.path, "/", 2)[0]]
		if s == nil {
			return nil, fmt.Errorf("line %d: %s is on no declared side", i+1, o.path)
		}
		o.path = strings.SplitN(o.path, "/", 2)[1]
		s.ops = append(s.ops, o)
		i = next
	}
	return sides, nil
}

// parseEntry reads the entry whose marker is lines[i] and returns the
// index of the line after it.
func parseEntry(lines []string, i int) (op, int, error) {
	m := marker.FindStringSubmatch(strings.TrimSuffix(lines[i], "\n"))
	if m == nil {
		return op{}, 0, fmt.Errorf("%q is not an entry's marker (-- PATH --, or -- PATH (KIND) --)", lines[i])
	}
	if err := checkPath(m[1]); err != nil {
		return op{}, 0, err
	}
	if !strings.Contains(m[1], "/") {
		return op{}, 0, fmt.Errorf("%s names a side, not a path on it", m[1])
	}
	o := op{path: m[1]}
	for k, w := range kindWords {
		if w == m[2] {
			o.kind = k
		}
	}
	end := i + 1
	for end < len(lines) && !strings.HasPrefix(lines[end], "-- ") {
		end++
	}
	body := lines[i+1 : end]
	switch o.kind {
	case opFile:
		o.e.data = []byte(strings.Join(body, ""))
	case opNoEOL:
		text := strings.Join(body, "")
		if !strings.HasSuffix(text, "\n") {
			return op{}, 0, fmt.Errorf("%s (%s) holds no line", m[1], m[2])
		}
		o.e.data = []byte(strings.TrimSuffix(text, "\n"))
	case opRemoved:
		if len(body) != 0 {
			return op{}, 0, fmt.Errorf("%s (removed) has lines below it", m[1])
		}
	default:
		if len(body) != 1 {
			return op{}, 0, fmt.Errorf("%s (%s) holds %d lines, not one Go string", m[1], m[2], len(body))
		}
		s, err := strconv.Unquote(strings.TrimSuffix(body[0], "\n"))
		if err != nil {
			return op{}, 0, fmt.Errorf("%s (%s): %v", m[1], m[2], err)
		}
		o.e = entry{data: []byte(s)}
		if o.kind == opLink {
			o.e = entry{link: s, isLink: true}
		}
	}
	return o, end, nil
}

// apply returns origin with the side's changes made. A removal must
// remove something, so that a typo in its path is an error.
func (s *side) apply(origin tree) (tree, error) {
	t := origin.clone()
	for _, o := range s.ops {
		if o.kind != opRemoved {
			t[o.path] = o.e
			continue
		}
		n := len(t)
		delete(t, o.path)
		for p := range t {
			if strings.HasPrefix(p, o.path+"/") {
				delete(t, p)
			}
		}
		if len(t) == n {
			return nil, fmt.Errorf("%s/%s (removed): no such path in %s", s.name, o.path, s.origin)
		}
	}
	if err := t.checkShape(); err != nil {
		return nil, fmt.Errorf("%s: %w", s.name, err)
	}
	return t, nil
}

// isText reports whether data can stand as lines below a marker and read
// back the same: UTF-8 text without control characters but tab and
// newline, ending in a newline, no line of which starts as a marker does.
func isText(data []byte) bool {
	if len(data) == 0 {
		return true
	}
	if !utf8.Valid(data) || data[len(data)-1] != '\n' || bytes.HasPrefix(data, []byte("-- ")) ||
		bytes.Contains(data, []byte("\n-- ")) {
		return false
	}
	return !bytes.ContainsFunc(data, func(r rune) bool { return r < 0x20 && r != '\n' && r != '\t' || r == 0x7f })
}

// formatChanges writes the sides in the form parseChanges reads, with a
// comment line first.
func formatChanges(comment string, sides []*side) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# %s\n", comment)
	for _, s := range sides {
		fmt.Fprintf(&b, "%s from %s\n", s.name, s.origin)
	}
	for _, s := range sides {
		for _, o := range s.ops {
			name := s.name + "/" + o.path
			switch o.kind {
			case opFile:
				fmt.Fprintf(&b, "-- %s --\n%s", name, o.e.data)
			case opNoEOL:
				fmt.Fprintf(&b, "-- %s (no final newline) --\n%s\n", name, o.e.data)
			case opRemoved:
				fmt.Fprintf(&b, "-- %s (removed) --\n", name)
			case opLink:
				fmt.Fprintf(&b, "-- %s (link) --\n%s\n", name, strconv.Quote(o.e.link))
			default:
				fmt.Fprintf(&b, "-- %s (quoted) --\n%s\n", name, strconv.Quote(string(o.e.data)))
			}
		}
	}
	return b.Bytes()
}

// changesFrom lists what turns origin into t. Removals come first, each
// the highest directory nothing of t lies below, and files and links
// follow in the order of their paths.
func changesFrom(origin, t tree) []op {
	var ops []op
	removed := map[string]bool{}
	for _, p := range origin.sortedPaths() {
		if _, ok := t[p]; ok {
			continue
		}
		top := p
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if !t.holdsBelow(d) {
				top = d
			}
		}
		if !removed[top] {
			removed[top] = true
			ops = append(ops, op{path: top, kind: opRemoved})
		}
	}
	for _, p := range t.sortedPaths() {
		e := t[p]
		if o, ok := origin[p]; ok && o.equal(e) {
			continue
		}
		kind := opFile
		switch {
		case e.isLink:
			kind = opLink
		case isText(e.data):
		case isText(append(e.data[:len(e.data):len(e.data)], '\n')):
			kind = opNoEOL
		default:
			kind = opQuoted
		}
		ops = append(ops, op{path: p, kind: kind, e: e})
	}
	return ops
}

// holdsBelow reports whether t holds a path below the directory d, or d.
func (t tree) holdsBelow(d string) bool {
	if _, ok := t[d]; ok {
		return true
	}
	for p := range t {
		if strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}

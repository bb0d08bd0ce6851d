package scenariodir

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// scenario is one scenario read whole: its sides, each a host, and the
// files beside them (expected.json, expected.txt, allow, env).
type scenario struct {
	sides map[string]tree
	files tree
}

// Published reports whether dir holds a scenario in the published layout,
// its before/ host present.
func Published(dir string) bool {
	st, err := os.Lstat(filepath.Join(dir, "before"))
	return err == nil && st.IsDir()
}

// load reads the scenario at dir in either form. A compact one is
// materialized in memory from the bases beside dir that its changes name.
func load(dir string) (*scenario, error) {
	dir = filepath.Clean(dir)
	root, err := openDir(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	ents, err := fs.ReadDir(root.FS(), ".")
	if err != nil {
		return nil, err
	}
	s := &scenario{sides: map[string]tree{}, files: tree{}}
	var changes []byte
	for _, d := range ents {
		name := d.Name()
		switch {
		case d.IsDir() && slices.Contains(Sides, name):
			if s.sides[name], err = readTree(filepath.Join(dir, name)); err != nil {
				return nil, err
			}
		case d.Type().IsRegular() && checkPath(name) == nil:
			data, err := readRegular(root, name)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", dir, err)
			}
			if name == ChangesFile {
				changes = data
				continue
			}
			s.files[name] = entry{data: data}
		default:
			return nil, fmt.Errorf("%s: %s is neither a side (%v) nor a plain file", dir, name, Sides)
		}
	}
	switch {
	case changes != nil && len(s.sides) > 0:
		return nil, fmt.Errorf("%s: holds both sides and %s", dir, ChangesFile)
	case changes != nil:
		return s, s.derive(dir, changes)
	case s.sides["before"] == nil || s.sides["after"] == nil:
		return nil, fmt.Errorf("%s: neither before/ and after/ nor %s", dir, ChangesFile)
	}
	return s, nil
}

// derive makes the scenario's sides from its changes file, each from its
// origin, a base beside dir or a side made before it.
func (s *scenario) derive(dir string, changes []byte) error {
	sides, err := parseChanges(changes)
	if err != nil {
		return fmt.Errorf("%s/%s: %w", dir, ChangesFile, err)
	}
	for _, sd := range sides {
		origin, ok := s.sides[sd.origin]
		if !ok {
			if origin, err = readTree(filepath.Join(filepath.Dir(dir), sd.origin)); err != nil {
				return fmt.Errorf("%s/%s: %s's base: %w", dir, ChangesFile, sd.name, err)
			}
		}
		if s.sides[sd.name], err = sd.apply(origin); err != nil {
			return fmt.Errorf("%s/%s: %w", dir, ChangesFile, err)
		}
	}
	if s.sides["before"] == nil || s.sides["after"] == nil {
		return fmt.Errorf("%s/%s: declares no before or no after side", dir, ChangesFile)
	}
	return nil
}

// write lays the scenario out at dst, a directory it creates, in the
// published layout.
func (s *scenario) write(dst string) error {
	if err := os.Mkdir(dst, dirMode); err != nil {
		return err
	}
	root, err := os.OpenRoot(dst)
	if err != nil {
		return err
	}
	defer root.Close()
	for name, t := range s.sides {
		if err := writeTree(root, name, t); err != nil {
			return fmt.Errorf("%s: %w", dst, err)
		}
	}
	if err := writeTree(root, ".", s.files); err != nil {
		return fmt.Errorf("%s: %w", dst, err)
	}
	return nil
}

// Materialize writes the scenario at src, in either form, to dst in the
// published layout. dst must not exist, and nothing is written outside it.
func Materialize(src, dst string) error {
	s, err := load(src)
	if err != nil {
		return err
	}
	return s.write(dst)
}

// Cache lays the scenarios under src out below dst in the published
// layout, each once, for a test binary whose tests read them by name. A
// published one is copied too, so that dst holds every scenario.
type Cache struct {
	src, dst string
	mu       sync.Mutex
	dirs     map[string]string
}

// NewCache returns a Cache of the scenarios under src that writes below
// dst, a directory it creates when first needed. It holds both as
// absolute paths, so that a test may change its directory after.
func NewCache(src, dst string) (*Cache, error) {
	var err error
	c := &Cache{dirs: map[string]string{}}
	if c.src, err = filepath.Abs(src); err != nil {
		return nil, err
	}
	if c.dst, err = filepath.Abs(dst); err != nil {
		return nil, err
	}
	return c, nil
}

// Dir returns where the scenario name lies in the published layout.
func (c *Cache) Dir(name string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if dir, ok := c.dirs[name]; ok {
		return dir, nil
	}
	if err := checkPath(name); err != nil || strings.Contains(name, "/") {
		return "", fmt.Errorf("scenario %q: not a plain name", name)
	}
	if err := os.MkdirAll(c.dst, dirMode); err != nil {
		return "", err
	}
	dir := filepath.Join(c.dst, name)
	if err := Materialize(filepath.Join(c.src, name), dir); err != nil {
		return "", err
	}
	c.dirs[name] = dir
	return dir, nil
}

// ForTest returns the scenario at src in the published layout, src itself
// when it is, else its materialized copy in a directory of the test's.
func ForTest(t testing.TB, src string) string {
	t.Helper()
	if Published(src) {
		return src
	}
	dst := filepath.Join(t.TempDir(), filepath.Base(filepath.Clean(src)))
	if err := Materialize(src, dst); err != nil {
		t.Fatal(err)
	}
	return dst
}

// compactComment is the first line of every changes file Compact writes.
const compactComment = "each side below is its origin (a base host beside this directory, or a side above) " +
	"with these entries added, replaced or removed; fixtures/scenarios/README.md says how to materialize it"

// Compact writes the scenario at src, in the published layout, to dst in
// the compact form over the base host at base, a directory that must lie
// beside dst to materialize it. Each side comes from whichever of the
// base and the sides before it leaves the fewest entries, and the form is
// read back and checked against src before anything is written.
func Compact(src, dst, base string) error {
	s, err := load(src)
	if err != nil {
		return err
	}
	if !Published(src) {
		return fmt.Errorf("%s: already compact", src)
	}
	baseName := filepath.Base(filepath.Clean(base))
	if header.FindStringSubmatch("after from "+baseName) == nil || slices.Contains(Sides, baseName) {
		return fmt.Errorf("%s: a base's name is lower-case letters, digits and -, and no side's", base)
	}
	bt, err := readTree(base)
	if err != nil {
		return err
	}
	var sides []*side
	for _, name := range Sides {
		t, ok := s.sides[name]
		if !ok {
			continue
		}
		best := &side{name: name, origin: baseName, ops: changesFrom(bt, t)}
		for _, prev := range slices.Backward(sides) {
			if ops := changesFrom(s.sides[prev.name], t); len(ops) < len(best.ops) {
				best = &side{name: name, origin: prev.name, ops: ops}
			}
		}
		sides = append(sides, best)
	}
	changes := formatChanges(compactComment, sides)
	if err := checkRoundTrip(s, changes, baseName, bt); err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	out := &scenario{files: s.files.clone()}
	out.files[ChangesFile] = entry{data: changes}
	return out.write(dst)
}

// checkRoundTrip derives the sides from changes over the base bt and
// wants every one of s's back, entry for entry.
func checkRoundTrip(s *scenario, changes []byte, baseName string, bt tree) error {
	sides, err := parseChanges(changes)
	if err != nil {
		return err
	}
	got := map[string]tree{baseName: bt}
	for _, sd := range sides {
		if got[sd.name], err = sd.apply(got[sd.origin]); err != nil {
			return err
		}
		want := s.sides[sd.name]
		if len(got[sd.name]) != len(want) {
			return fmt.Errorf("%s: %d entries back, want %d", sd.name, len(got[sd.name]), len(want))
		}
		for p, e := range want {
			if g, ok := got[sd.name][p]; !ok || !g.equal(e) {
				return fmt.Errorf("%s/%s: not the same after the round trip", sd.name, p)
			}
		}
	}
	return nil
}

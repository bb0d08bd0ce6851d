package scenariodir

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

const scenarios = "../../fixtures/scenarios"

// TestEveryScenarioRoundTrips lays each scenario of the repository out in
// the published layout, writes that in the compact form over a copy of
// the base, lays the compact form out again, and wants the same hosts,
// files and links, byte for byte, at each step.
func TestEveryScenarioRoundTrips(t *testing.T) {
	expected, err := filepath.Glob(filepath.Join(scenarios, "*", "expected.json"))
	if err != nil || len(expected) < 30 {
		t.Fatalf("%d scenarios: %v", len(expected), err)
	}
	cache, err := NewCache(scenarios, filepath.Join(t.TempDir(), "published"))
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	if out, err := exec.Command("cp", "-a", filepath.Join(scenarios, "base"), work).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	for _, exp := range expected {
		name := filepath.Base(filepath.Dir(exp))
		dir, err := cache.Dir(name)
		if err != nil {
			t.Fatal(err)
		}
		if again, err := cache.Dir(name); again != dir || err != nil {
			t.Fatalf("%s: laid out again at %s (%v)", name, again, err)
		}
		want, err := load(dir)
		if err != nil {
			t.Fatal(err)
		}
		compact := filepath.Join(work, name)
		if err := Compact(dir, compact, filepath.Join(work, "base")); err != nil {
			t.Fatal(err)
		}
		if !Published(filepath.Join(scenarios, name)) {
			a, _ := os.ReadFile(filepath.Join(scenarios, name, ChangesFile))
			b, _ := os.ReadFile(filepath.Join(compact, ChangesFile))
			if !bytes.Equal(a, b) {
				t.Errorf("%s: its changes file is not the one compact writes", name)
			}
		}
		again := filepath.Join(work, "again-"+name)
		if err := Materialize(compact, again); err != nil {
			t.Fatal(err)
		}
		got, err := load(again)
		if err != nil {
			t.Fatal(err)
		}
		for side, tr := range want.sides {
			checkSameTree(t, name+"/"+side, got.sides[side], tr)
		}
		checkSameTree(t, name, got.files, want.files)
		if len(got.sides) != len(want.sides) {
			t.Errorf("%s: %d sides back, want %d", name, len(got.sides), len(want.sides))
		}
	}
}

func checkSameTree(t *testing.T, what string, got, want tree) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d entries, want %d", what, len(got), len(want))
	}
	for p, e := range want {
		if g, ok := got[p]; !ok || !g.equal(e) {
			t.Errorf("%s/%s: differs or is missing", what, p)
		}
	}
}

// TestChangesKeepEveryByte writes a side of files no text form holds as
// they are and reads it back the same.
func TestChangesKeepEveryByte(t *testing.T) {
	origin := tree{"proc/1/comm": {data: []byte("init\n")}, "proc/9/stat": {data: []byte("9 (x)\n")}}
	want := tree{
		"proc/1/comm":    {data: []byte("init\n")},
		"proc/1/cmdline": {data: []byte("python3\x00-c\x00\x00")},
		"proc/1/bad":     {data: []byte("caf\xe9\n")},
		"proc/1/marker":  {data: []byte("a\n-- after/proc/1/x --\n")},
		"proc/1/empty":   {data: nil},
		"proc/1/noeol":   {data: []byte("{\n}")},
		"proc/1/cr":      {data: []byte("a\r\n")},
		"proc/1/exe":     {link: "/tmp/ -- (deleted)", isLink: true},
	}
	ops := changesFrom(origin, want)
	data := formatChanges("a side", []*side{{name: "after", origin: "base", ops: ops}})
	sides, err := parseChanges(data)
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	got, err := sides[0].apply(origin)
	if err != nil {
		t.Fatal(err)
	}
	checkSameTree(t, "after", got, want)
	for _, s := range []string{"-- after/proc/9 (removed) --\n", "-- after/proc/1/noeol (no final newline) --\n{\n}\n",
		"-- after/proc/1/cmdline (quoted) --\n\"python3\\x00-c\\x00\\x00\"\n"} {
		if !bytes.Contains(data, []byte(s)) {
			t.Errorf("no %q in\n%s", s, data)
		}
	}
}

// TestBadChangesRefused holds each malformed or hostile changes file to
// one error that says what is wrong, and to nothing written.
func TestBadChangesRefused(t *testing.T) {
	for _, tc := range []struct{ changes, want string }{
		{"before from base\nafter from base\n-- after/../../../etc/x --\nroot\n", `element ".." is not a plain name`},
		{"before from base\nafter from base\n-- after//etc/x --\n", "is not a plain name"},
		{"before from base\nafter from base\n-- /etc/x --\n", "is not a plain name"},
		{"before from base\nafter from base\n-- after/proc/1/x y --\n", "not an entry's marker"},
		{"before from base\nafter from base\n-- elsewhere/x --\n", "on no declared side"},
		{"before from base\nafter from during\n", "which no line above declares"},
		{"before from base\nbefore from base\n", "not a new side's header"},
		{"before from ../../etc\n", "not a new side's header"},
		{"before from base\nafter from base\n-- after/proc/7 (removed) --\n", "no such path"},
		{"before from base\nafter from base\n-- after/proc/1/exe (link) --\n/x\n", "invalid syntax"},
		{"before from base\nafter from base\n-- after/proc/1/comm/x --\n", "lies below the file"},
		{"before from base\nafter from base\n-- after/x --\nno newline", "no newline"},
		{"before from base\n", "no before or no after"},
		{"before from nowhere\nafter from base\n", "before's base"},
	} {
		dir := t.TempDir()
		writeBase(t, filepath.Join(dir, "base"))
		s := filepath.Join(dir, "s")
		writeFiles(t, s, map[string]string{ChangesFile: tc.changes})
		dst := filepath.Join(dir, "out")
		err := Materialize(s, dst)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: %v, want one line with %q", tc.changes, err, tc.want)
		}
		if _, err := os.Lstat(dst); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%q: %s written", tc.changes, dst)
		}
	}
}

// TestNoWriteThroughLinks gives a base whose proc is a link out of the
// tree, and changes that write below it. The link is refused as a
// directory, and the place it names stays empty.
func TestNoWriteThroughLinks(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	writeFiles(t, filepath.Join(dir, "base"), map[string]string{"nvml.json": "{}\n"})
	if err := os.Symlink(outside, filepath.Join(dir, "base", "proc")); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, filepath.Join(dir, "s"), map[string]string{ChangesFile: "before from base\nafter from base\n-- after/proc/1/comm --\nx\n"})
	if err := Materialize(filepath.Join(dir, "s"), filepath.Join(dir, "out")); err == nil || !strings.Contains(err.Error(), "lies below the file") {
		t.Errorf("materialized through a link: %v", err)
	}
	// A side that is itself a link out of the tree is refused.
	p := filepath.Join(dir, "p")
	writeFiles(t, p, map[string]string{"expected.json": "{}\n"})
	writeFiles(t, filepath.Join(p, "after"), map[string]string{"nvml.json": "{}\n"})
	if err := os.Symlink(outside, filepath.Join(p, "before")); err != nil {
		t.Fatal(err)
	}
	if err := Materialize(p, filepath.Join(dir, "out2")); err == nil || !strings.Contains(err.Error(), "neither a side") {
		t.Errorf("a linked side: %v", err)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("wrote %d entries outside the tree", len(ents))
	}
	// An existing destination is never written into.
	good := t.TempDir()
	writeBase(t, filepath.Join(good, "base"))
	writeFiles(t, filepath.Join(good, "s"), map[string]string{ChangesFile: "before from base\nafter from before\n"})
	if err := Materialize(filepath.Join(good, "s"), outside); !errors.Is(err, os.ErrExist) {
		t.Errorf("materialized into an existing directory: %v", err)
	}
	if err := Materialize(filepath.Join(good, "s"), filepath.Join(good, "out")); err != nil {
		t.Errorf("the same scenario into a new directory: %v", err)
	}
}

// TestBoundedReads refuses a base file and a changes file past maxFile,
// and a FIFO in the base, without blocking on it.
func TestBoundedReads(t *testing.T) {
	dir := t.TempDir()
	writeBase(t, filepath.Join(dir, "base"))
	big := filepath.Join(dir, "base", "proc", "big")
	if err := os.WriteFile(big, nil, fileMode); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, 1<<32); err != nil {
		t.Fatal(err)
	}
	s := filepath.Join(dir, "s")
	writeFiles(t, s, map[string]string{ChangesFile: "before from base\nafter from base\n"})
	if err := Materialize(s, filepath.Join(dir, "out")); err == nil || !strings.Contains(err.Error(), "larger than the limit") {
		t.Errorf("a 4 GiB sparse file: %v", err)
	}
	os.Remove(big)
	if err := syscall.Mkfifo(filepath.Join(dir, "base", "proc", "fifo"), fileMode); err != nil {
		t.Fatal(err)
	}
	if err := Materialize(s, filepath.Join(dir, "out")); err == nil || !strings.Contains(err.Error(), "neither a file") {
		t.Errorf("a FIFO: %v", err)
	}
	if err := os.Truncate(filepath.Join(s, ChangesFile), maxFile+1); err != nil {
		t.Fatal(err)
	}
	if err := Materialize(s, filepath.Join(dir, "out")); err == nil || !strings.Contains(err.Error(), "larger than the limit") {
		t.Errorf("a changes file past the limit: %v", err)
	}
}

// FuzzParseChanges reads any changes file without panicking, and what it
// reads writes back to a file that reads the same.
func FuzzParseChanges(f *testing.F) {
	for _, name := range []string{"zombie-memory", "rocm-worker-outside-allocation", "xid-79-tenant"} {
		if data, err := os.ReadFile(filepath.Join(scenarios, name, ChangesFile)); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte("before from base\nafter from before\n-- after/a (quoted) --\n\"\\x00\"\n-- after/b (removed) --\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		sides, err := parseChanges(data)
		if err != nil {
			return
		}
		again, err := parseChanges(formatChanges("again", sides))
		if err != nil || len(again) != len(sides) {
			t.Fatalf("the written form does not read back: %v", err)
		}
		for i := range sides {
			a, err := sides[i].apply(tree{})
			if err != nil {
				continue
			}
			b, err := again[i].apply(tree{})
			if err != nil {
				t.Fatalf("%s applies, and its written form does not: %v", sides[i].name, err)
			}
			checkSameTree(t, sides[i].name, b, a)
		}
	})
}

// writeBase writes a base host of one process.
func writeBase(t *testing.T, dir string) {
	t.Helper()
	writeFiles(t, dir, map[string]string{"nvml.json": "{}\n", "proc/1/comm": "init\n", "proc/stat": "btime 1\n"})
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), dirMode); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), fileMode); err != nil {
			t.Fatal(err)
		}
	}
}

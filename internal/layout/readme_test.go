package layout

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadmeLayoutNamesEveryPackage: the Layout of README.md is the map a
// newcomer reads first. Every package of the module is named there once, on
// a line of its own that gives its role, and every path the map names is a
// directory of the tree. A package added, moved or removed fails here until
// the map is drawn again. A package the map marks "(tests)" is named in
// docs/testing.md too, which says what it gives the tests.
func TestReadmeLayoutNamesEveryPackage(t *testing.T) {
	const module = "github.com/gpusnap/gpusnap"
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	named, forTests := layoutPaths(t, string(readme))
	testingDoc, err := os.ReadFile("../../docs/testing.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range forTests {
		if !strings.Contains(string(testingDoc), "`"+path+"`") {
			t.Errorf("README.md's layout marks %s/ (tests), and docs/testing.md does not name it", path)
		}
	}
	for path := range named {
		if fi, err := os.Stat(filepath.Join("../..", path)); err != nil || !fi.IsDir() {
			t.Errorf("README.md's layout names %s/, which is no directory of the tree", path)
		}
	}
	// Output, not CombinedOutput: go list warns on stderr of the links in
	// fixtures, which are no packages.
	out, err := exec.Command("go", "list", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := strings.Fields(string(out))
	if len(pkgs) < 20 {
		t.Fatalf("go list found %d packages: %q", len(pkgs), pkgs)
	}
	for _, pkg := range pkgs {
		rel := strings.TrimPrefix(pkg, module+"/")
		if n := named[rel]; n != 1 {
			t.Errorf("README.md's layout names package %s/ %d times, want once with its role", rel, n)
		}
	}
}

// layoutPaths reads the code block under README's "## Layout" heading,
// one `path/  role` line an entry. It counts how often each path is named
// and lists those whose role begins "(tests)". A line that is not such an
// entry (a role run onto a second line) fails.
func layoutPaths(t *testing.T, readme string) (named map[string]int, forTests []string) {
	t.Helper()
	_, section, ok := strings.Cut(readme, "\n## Layout\n")
	if ok {
		_, section, ok = strings.Cut(section, "```\n")
	}
	if ok {
		section, _, ok = strings.Cut(section, "```")
	}
	if !ok {
		t.Fatal("README.md has no code block under ## Layout")
	}
	named = map[string]int{}
	for i, line := range strings.Split(strings.TrimSuffix(section, "\n"), "\n") {
		path, role, _ := strings.Cut(line, " ")
		if !strings.HasSuffix(path, "/") || strings.TrimSpace(role) == "" {
			t.Errorf("line %d of README.md's layout is not `path/  role` on one line: %q", i+1, line)
			continue
		}
		path = strings.TrimSuffix(path, "/")
		named[path]++
		if strings.HasPrefix(strings.TrimSpace(role), "(tests)") {
			forTests = append(forTests, path)
		}
	}
	return named, forTests
}

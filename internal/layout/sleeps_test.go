package layout

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// workloadMarker is what a line holding a time.Sleep must carry: a sleep
// that is the workload itself (a process that must live N ms, a pace), not
// a wait for something to happen, which is testwait's job.
const workloadMarker = "// workload:"

// TestNoBareSleepsInTests: no test file, and no file of the live-test
// harness, calls or takes time.Sleep on a line without workloadMarker. A
// sleep that waits for an event is a flake under load and a waste when idle.
func TestNoBareSleepsInTests(t *testing.T) {
	root := filepath.Join("..", "..")
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		harness := filepath.Dir(path) == filepath.Join(root, "internal", "livetest")
		if !strings.HasSuffix(path, "_test.go") && !(harness && strings.HasSuffix(path, ".go")) {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		bare, err := bareSleeps(path, src)
		if err != nil {
			return err
		}
		for _, at := range bare {
			t.Errorf("%s: time.Sleep without %q: wait on the condition with testwait, or say why the sleep is the workload", at, workloadMarker)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The walk must have reached the tree, not an empty directory.
	if files < 100 {
		t.Fatalf("%d test files under %s, want the whole module's", files, root)
	}
}

// bareSleeps returns file:line of each use of the time package's Sleep (a
// call or a func value, under any import name) on a line without
// workloadMarker.
func bareSleeps(name string, src []byte) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	timeName := ""
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == "time" {
			timeName = "time"
			if imp.Name != nil {
				timeName = imp.Name.Name
			}
		}
	}
	if timeName == "" || timeName == "_" {
		return nil, nil
	}
	marked := map[int]bool{}
	for _, g := range f.Comments {
		for _, c := range g.List {
			if strings.HasPrefix(c.Text, workloadMarker) {
				marked[fset.Position(c.Pos()).Line] = true
			}
		}
	}
	var bare []string
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "Sleep" {
			return true
		}
		if x, ok := sel.X.(*ast.Ident); ok && (x.Name == timeName || timeName == ".") {
			if pos := fset.Position(sel.Pos()); !marked[pos.Line] {
				bare = append(bare, pos.String())
			}
		}
		return true
	})
	return bare, nil
}

// The check finds a bare sleep under the time package's own name or another,
// as a call or a value, and passes a marked one and another package's Sleep.
func TestBareSleepsFound(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want int
	}{
		{`import "time"; func f() { time.Sleep(time.Second) }`, 1},
		{`import "time"; func f() { time.Sleep(time.Second) // workload: the child lives 1s` + "\n}", 0},
		{`import "time"; func f() { time.Sleep(time.Second) } // a wait, said so` + "\n", 1},
		{`import tm "time"; var s = tm.Sleep`, 1},
		{`import "time"; type c struct{}; func (c) Sleep() {}; func f(x c) { x.Sleep(); _ = time.Now }`, 0},
		{`func f() { time.Sleep(1) }`, 0},
	} {
		bare, err := bareSleeps("x_test.go", []byte("package x\n"+tc.src))
		if err != nil {
			t.Fatalf("%s: %v", tc.src, err)
		}
		if len(bare) != tc.want {
			t.Errorf("%s: %d bare sleeps %v, want %d", tc.src, len(bare), bare, tc.want)
		}
	}
}

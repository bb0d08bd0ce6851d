package layout

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// groundFloor is the package of capture's pure parsers of /proc text and
// its bounded reader, which every capture path and watch stand on.
const groundFloor = "capture/procfs"

// TestGroundFloorImports: the ground floor links, of gpusnap's packages,
// snapshot alone (for its plain types), and beyond the standard library
// only golang.org/x/sys. It is tested and fuzzed without a capture, a store
// or a GPU, and nothing above it can pull them in under it.
func TestGroundFloorImports(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}",
		"github.com/gpusnap/gpusnap/"+groundFloor).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", groundFloor, err, out)
	}
	allowed := map[string]bool{"github.com/gpusnap/gpusnap/" + groundFloor: true, "github.com/gpusnap/gpusnap/snapshot": true}
	for _, dep := range strings.Fields(string(out)) {
		if !allowed[dep] && !strings.HasPrefix(dep, "golang.org/x/sys/") {
			t.Errorf("%s links %s", groundFloor, dep)
		}
	}
}

// TestGroundFloorParsersFuzzed: each exported function or method of the
// ground floor that reads text (its first parameter a []byte or string named
// data, line or text) is called by a fuzz target of the package, which
// scripts/fuzz.sh runs in CI. The text is a tenant's or a stranger's.
func TestGroundFloorParsersFuzzed(t *testing.T) {
	fset := token.NewFileSet()
	names, err := filepath.Glob(filepath.Join("..", "..", groundFloor, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	parsers, fuzzed := map[string]token.Position{}, map[string]bool{}
	for _, name := range names {
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			switch {
			case !ok:
			case strings.HasSuffix(name, "_test.go") && strings.HasPrefix(fn.Name.Name, "Fuzz"):
				ast.Inspect(fn.Body, func(n ast.Node) bool {
					if call, ok := n.(*ast.CallExpr); ok {
						fuzzed[calleeName(call.Fun)] = true
					}
					return true
				})
			case !strings.HasSuffix(name, "_test.go") && fn.Name.IsExported() && readsText(fn.Type):
				parsers[fn.Name.Name] = fset.Position(fn.Pos())
			}
		}
	}
	if len(parsers) == 0 {
		t.Fatalf("no parser found in %s", groundFloor)
	}
	for name, pos := range parsers {
		if !fuzzed[name] {
			t.Errorf("%s: %s reads text, and no fuzz target calls it", pos, name)
		}
	}
}

// readsText reports whether a function's first parameter is a []byte or a
// string named data, line or text.
func readsText(ft *ast.FuncType) bool {
	if len(ft.Params.List) == 0 || len(ft.Params.List[0].Names) == 0 {
		return false
	}
	switch ft.Params.List[0].Names[0].Name {
	case "data", "line", "text":
	default:
		return false
	}
	switch typ := ft.Params.List[0].Type.(type) {
	case *ast.Ident:
		return typ.Name == "string"
	case *ast.ArrayType:
		elem, ok := typ.Elt.(*ast.Ident)
		return typ.Len == nil && ok && elem.Name == "byte"
	}
	return false
}

// calleeName is the name a call calls, a method's without its receiver.
func calleeName(fun ast.Expr) string {
	switch f := fun.(type) {
	case *ast.Ident:
		return f.Name
	case *ast.SelectorExpr:
		return f.Sel.Name
	}
	return ""
}

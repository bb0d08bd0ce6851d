package layout

import (
	"go/ast"
	"go/token"
	"testing"
)

// maxFuncLines bounds a hand-written function: past it, a function holds
// more than one step of its work, and the next engineer cannot keep it in
// view at once.
const maxFuncLines = 120

// TestFunctionsAreShort fails on each hand-written function, declared or
// literal, over maxFuncLines lines, naming its file and line.
func TestFunctionsAreShort(t *testing.T) {
	fset := token.NewFileSet()
	long := 0
	for name, f := range sourceFiles(t, fset) {
		ast.Inspect(f, func(n ast.Node) bool {
			if n == nil {
				return false
			}
			switch n.(type) {
			case *ast.FuncDecl, *ast.FuncLit:
				start, end := fset.Position(n.Pos()).Line, fset.Position(n.End()).Line
				if lines := end - start + 1; lines > maxFuncLines {
					t.Errorf("%s:%d: a function of %d lines", name, start, lines)
					long++
				}
			}
			return true
		})
	}
	if long > 0 {
		t.Errorf("%d functions over %d lines: split each into its steps", long, maxFuncLines)
	}
}

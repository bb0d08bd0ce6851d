package layout

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// maxCommentWords bounds one comment group: a contract and its reason fit
// in two or three sentences, and a longer comment is usually narration.
const maxCommentWords = 60

// sourceFiles parses every hand-written, non-test Go file of the module,
// keyed by its slash path from the module root, with its comments.
func sourceFiles(t *testing.T, fset *token.FileSet) map[string]*ast.File {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]*ast.File{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		files[filepath.ToSlash(rel)] = f
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no Go files under %s", root)
	}
	return files
}

// TestCommentsAreShort fails on each comment group (a doc comment or any
// other run of comment lines) of more than maxCommentWords words.
func TestCommentsAreShort(t *testing.T) {
	fset := token.NewFileSet()
	files := sourceFiles(t, fset)
	var failed []string
	for rel, f := range files {
		for _, g := range f.Comments {
			n := len(strings.Fields(g.Text()))
			if n <= maxCommentWords {
				continue
			}
			line := fset.Position(g.Pos()).Line
			failed = append(failed, fmt.Sprintf("%s:%d: comment of %d words", rel, line, n))
		}
	}
	sort.Strings(failed)
	for _, m := range failed {
		t.Error(m)
	}
	if len(failed) > 0 {
		t.Errorf("%d comment groups over %d words: rewrite each as a contract and a reason", len(failed), maxCommentWords)
	}
}

// TestRuleDocsNameTheRule holds each diff rule (a function of a
// *comparison returning []Finding, in diff/rule_*.go) to a doc comment in
// Go's form, starting "ruleName reports ".
func TestRuleDocsNameTheRule(t *testing.T) {
	fset := token.NewFileSet()
	files := sourceFiles(t, fset)
	rules := 0
	for rel, f := range files {
		if !strings.HasPrefix(rel, "diff/rule_") {
			continue
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !isRule(fn.Type) {
				continue
			}
			rules++
			name := fn.Name.Name
			if fn.Doc == nil || !strings.HasPrefix(fn.Doc.Text(), name+" reports ") {
				t.Errorf("%s:%d: the doc of rule %s does not start %q", rel, fset.Position(fn.Pos()).Line, name, name+" reports ")
			}
		}
	}
	if rules == 0 {
		for rel := range files {
			if strings.HasPrefix(rel, "diff/rule_") {
				t.Fatal("diff/rule_*.go hold no rule: the rule signature this test looks for has changed")
			}
		}
	}
}

// isRule says whether a function's type is func(*comparison) []Finding.
func isRule(ft *ast.FuncType) bool {
	if ft.Params.NumFields() != 1 || ft.Results.NumFields() != 1 {
		return false
	}
	star, ok := ft.Params.List[0].Type.(*ast.StarExpr)
	if !ok || !isIdent(star.X, "comparison") {
		return false
	}
	arr, ok := ft.Results.List[0].Type.(*ast.ArrayType)
	return ok && arr.Len == nil && isIdent(arr.Elt, "Finding")
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

package layout

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// sourceFiles parses every hand-written, non-test Go file of the module,
// keyed by its slash path from the module root, with its comments.
func sourceFiles(t *testing.T, fset *token.FileSet) map[string]*ast.File {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return sourceFilesUnder(t, fset, root)
}

// sourceFilesUnder is sourceFiles of the tree at root.
func sourceFilesUnder(t *testing.T, fset *token.FileSet, root string) map[string]*ast.File {
	t.Helper()
	files := map[string]*ast.File{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
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

// colonHabitBound bounds the colons and semicolons a sentence of a
// package's comments. Prose that leans on them strings asides together
// where a sentence would say one thing. The bound is the anchors' habit,
// measured by colonHabit (docs/testing.md has the figures).
const colonHabitBound = 0.10

// maxMarksPerGroup bounds the colons and semicolons of one comment group
// beyond its sentences: a group of two sentences may hold two.
const maxMarksPerGroup = 1

// notProse are the spans of a comment whose colons are not punctuation:
// code in backquotes, addresses, times and ports, key:value tokens.
var notProse = regexp.MustCompile("`[^`]*`|[a-z]+://\\S+|\\S+:\\S+")

// sentenceEnd ends a sentence: a full stop, question or exclamation mark
// before a space or the comment's end.
var sentenceEnd = regexp.MustCompile(`[.!?](\s|$)`)

// colonHabit counts a comment group's colons and semicolons outside
// notProse and outside its indented lines (a quoted file or code), and its
// sentences (at least one).
func colonHabit(g *ast.CommentGroup) (marks, sentences int) {
	var prose []string
	for line := range strings.SplitSeq(g.Text(), "\n") {
		if !strings.HasPrefix(line, "\t") && !strings.HasPrefix(line, " ") {
			prose = append(prose, line)
		}
	}
	text := notProse.ReplaceAllString(strings.Join(prose, "\n"), "x")
	marks = strings.Count(text, ":") + strings.Count(text, ";")
	return marks, max(1, len(sentenceEnd.FindAllString(text, -1)))
}

// TestCommentColonHabit fails on a comment group with more colons and
// semicolons than sentences by more than maxMarksPerGroup, naming its file
// and line. It fails on a package whose comments run above
// colonHabitBound too.
func TestCommentColonHabit(t *testing.T) {
	fset := token.NewFileSet()
	var failed []string
	type count struct{ marks, sentences int }
	byPackage := map[string]*count{}
	for rel, f := range sourceFiles(t, fset) {
		pkg := path.Dir(rel)
		if byPackage[pkg] == nil {
			byPackage[pkg] = &count{}
		}
		for _, g := range f.Comments {
			m, s := colonHabit(g)
			byPackage[pkg].marks += m
			byPackage[pkg].sentences += s
			if m > s+maxMarksPerGroup {
				failed = append(failed, fmt.Sprintf("%s:%d: %d colons and semicolons in %d sentences", rel, fset.Position(g.Pos()).Line, m, s))
			}
		}
	}
	for pkg, c := range byPackage {
		if habit := float64(c.marks) / float64(c.sentences); habit > colonHabitBound {
			failed = append(failed, fmt.Sprintf("%s: %.3f colons and semicolons a sentence, over %.2f", pkg, habit, colonHabitBound))
		}
	}
	sort.Strings(failed)
	for _, m := range failed {
		t.Error(m)
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

package diff

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The findings tables of docs/diff.md and docs/spec.md are the registry, a
// row for each kind, no other, and in each row the severities its rule may
// raise.
func TestRegistryIsTheDocsTable(t *testing.T) {
	for _, file := range []string{"../docs/diff.md", "../docs/spec.md"} {
		rows := findingsTable(t, file)
		for kind, severities := range rows {
			rule := RuleOf(kind)
			if rule == nil {
				t.Errorf("%s has a row for %s, which no rule raises", file, kind)
				continue
			}
			var declared []string
			for _, s := range rule.Severities {
				declared = append(declared, s.String())
			}
			slices.Sort(declared)
			if !slices.Equal(severities, declared) {
				t.Errorf("%s: %s names severities %v, its rule declares %v", kind, file, severities, declared)
			}
		}
		for _, r := range Rules() {
			if _, ok := rows[r.Kind]; !ok {
				t.Errorf("%s has no row in %s's findings table", r.Kind, file)
			}
		}
	}
}

// findingsTable reads the table under a doc's "## Findings", each row's
// kind and the severities its last column names, sorted.
func findingsTable(t *testing.T, file string) map[string][]string {
	t.Helper()
	doc, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	at := strings.Index(text, "\n## Findings\n")
	if at < 0 {
		t.Fatalf("%s has no Findings section", file)
	}
	table := text[at:]
	table = table[strings.Index(table, "\n|"):]
	table = table[:strings.Index(table, "\n\n")+1]
	row := regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\|(.*)\\| (.*) \\|$")
	backticked := regexp.MustCompile("`([a-z_]+)`")
	rows := map[string][]string{}
	for _, m := range row.FindAllStringSubmatch(table, -1) {
		said := []string{}
		for _, w := range backticked.FindAllStringSubmatch(m[3], -1) {
			if _, err := ParseSeverity(w[1]); err == nil && !slices.Contains(said, w[1]) {
				said = append(said, w[1])
			}
		}
		slices.Sort(said)
		rows[m[1]] = said
	}
	if len(rows) == 0 {
		t.Fatalf("%s: no row in its findings table", file)
	}
	return rows
}

// docs/diff.md names the kinds a check raises, those whose rule has a
// check function, and no other.
func TestRegistryIsTheCheckDocs(t *testing.T) {
	doc, err := os.ReadFile("../docs/diff.md")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(string(doc)), " ")
	at := strings.Index(text, "The kinds a check raises are ")
	if at < 0 {
		t.Fatal("docs/diff.md does not say which kinds a check raises")
	}
	sentence := text[at : at+strings.Index(text[at:], ";")]
	var said, declared []string
	for _, m := range regexp.MustCompile("`([a-z_]+)`").FindAllStringSubmatch(sentence, -1) {
		said = append(said, m[1])
	}
	for _, r := range Rules() {
		if r.check != nil {
			declared = append(declared, r.Kind)
		}
	}
	slices.Sort(said)
	slices.Sort(declared)
	if !slices.Equal(said, declared) {
		t.Errorf("docs/diff.md says a check raises %v, the rules with a check function are %v", said, declared)
	}
}

// docs/ocsf.md's titles are the rules' titles, one row a kind.
func TestRegistryIsTheOCSFTitles(t *testing.T) {
	doc, err := os.ReadFile("../docs/ocsf.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	at := strings.Index(text, "\n## Titles\n")
	if at < 0 {
		t.Fatal("docs/ocsf.md has no Titles section")
	}
	titles := map[string]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| (.+) \\|$").FindAllStringSubmatch(text[at:], -1) {
		titles[m[1]] = m[2]
	}
	for _, r := range Rules() {
		if titles[r.Kind] != r.Title {
			t.Errorf("docs/ocsf.md titles %s %q, its rule %q", r.Kind, titles[r.Kind], r.Title)
		}
		delete(titles, r.Kind)
	}
	for kind := range titles {
		t.Errorf("docs/ocsf.md titles %s, which no rule raises", kind)
	}
}

// Every rule is whole, with a title, its severities lowest first, and a
// function that raises it (persistence runs on the others' findings).
func TestRegistryRulesAreWhole(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range Rules() {
		if seen[r.Kind] || r.Title == "" || len(r.Severities) == 0 || !slices.IsSorted(r.Severities) {
			t.Errorf("rule %s: duplicate, untitled or severities %v not lowest first", r.Kind, r.Severities)
		}
		seen[r.Kind] = true
		if r.compare == nil && r.check == nil && r.Kind != KindPersistence {
			t.Errorf("rule %s is raised by nothing", r.Kind)
		}
		if RuleOf(r.Kind) != r {
			t.Errorf("RuleOf(%s) is another rule", r.Kind)
		}
	}
}

// Every rule a file of this package declares (a *Rule literal in a
// package-level var) is registered, each at an Order of its own. A rule
// left out would never run, and two at one Order would run in the order
// the files happen to be read.
func TestRegistryHoldsEveryDeclaredRule(t *testing.T) {
	fset := token.NewFileSet()
	files, _ := filepath.Glob("*.go")
	declared, unregistered := 0, 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.VAR {
				continue
			}
			for _, spec := range gen.Specs {
				for _, v := range spec.(*ast.ValueSpec).Values {
					if call, ok := v.(*ast.CallExpr); ok && isIdentNamed(call.Fun, "register") && len(call.Args) == 1 {
						v = call.Args[0]
					} else if isRuleLiteral(v) {
						unregistered++
						t.Errorf("%s: a rule declared without register never runs", fset.Position(v.Pos()))
					}
					if isRuleLiteral(v) {
						declared++
					}
				}
			}
		}
	}
	if declared-unregistered != len(Rules()) {
		t.Errorf("the package registers %d rules, the registry holds %d", declared-unregistered, len(Rules()))
	}
	orders := map[int]string{}
	for _, r := range Rules() {
		if other, ok := orders[r.Order]; ok {
			t.Errorf("rules %s and %s share Order %d", other, r.Kind, r.Order)
		}
		orders[r.Order] = r.Kind
	}
}

// isRuleLiteral reports whether e is &Rule{...}.
func isRuleLiteral(e ast.Expr) bool {
	u, ok := e.(*ast.UnaryExpr)
	if !ok || u.Op != token.AND {
		return false
	}
	lit, ok := u.X.(*ast.CompositeLit)
	return ok && isIdentNamed(lit.Type, "Rule")
}

func isIdentNamed(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

// coveredByTests names, for each kind that no fixture scenario raises (its
// evidence is an event log, a kernel log, a series or a live process's
// state), the test file of this package that raises it.
var coveredByTests = map[string]string{
	KindRenamedDeviceNode:     "rule_device_test.go",
	KindUnreadableProcess:     "rule_hidden_test.go",
	KindTransientGPUProcess:   "rule_transient_test.go",
	KindHiddenDeviceUse:       "rule_window_test.go",
	KindWindowNotCovered:      "rule_window_test.go",
	KindHiddenProcess:         "rule_hidden_test.go",
	KindEgressConnection:      "rule_egress_test.go",
	KindPersistence:           "rule_persistence_test.go",
	KindGPUBusyWithoutProcess: "rule_busy_test.go",
	KindGPUInUse:              "check_test.go",
}

// Every kind is raised by a fixture scenario (fixtures/scenarios/*/
// expected.json), or by a test of this package that names it.
func TestRegistryKindsAreCovered(t *testing.T) {
	inScenario := map[string]bool{}
	expected, _ := filepath.Glob("../fixtures/scenarios/*/expected.json")
	if len(expected) == 0 {
		t.Fatal("no scenario found")
	}
	for _, file := range expected {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var e struct {
			Findings []struct {
				Kind string `json:"kind"`
			} `json:"findings"`
		}
		if err := json.Unmarshal(data, &e); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		for _, f := range e.Findings {
			inScenario[f.Kind] = true
		}
	}
	for _, r := range Rules() {
		file, named := coveredByTests[r.Kind]
		switch {
		case inScenario[r.Kind] && named:
			t.Errorf("%s is raised by a scenario: drop it from coveredByTests", r.Kind)
		case inScenario[r.Kind]:
		case !named:
			t.Errorf("%s is raised by no scenario and no test names it: add its scenario", r.Kind)
		default:
			src, err := os.ReadFile(file)
			if err != nil || !strings.Contains(string(src), r.Kind) && !strings.Contains(string(src), constName(r.Kind)) {
				t.Errorf("%s: %s does not name it (%v)", r.Kind, file, err)
			}
		}
	}
}

// constName is the Go constant of a kind in this package, KindXxx.
func constName(kind string) string {
	var b strings.Builder
	b.WriteString("Kind")
	for part := range strings.SplitSeq(kind, "_") {
		if part == "gpu" {
			b.WriteString("GPU")
			continue
		}
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	return b.String()
}

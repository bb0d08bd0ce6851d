package diff

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The findings table of docs/diff.md is the registry: a row for each kind,
// no other, and in each row the severities its rule may raise.
func TestRegistryIsTheDocsTable(t *testing.T) {
	doc, err := os.ReadFile("../docs/diff.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	table := text[strings.Index(text, "\n## Findings\n"):]
	table = table[strings.Index(table, "\n|"):]
	table = table[:strings.Index(table, "\n\n")+1]
	row := regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\|(.*)\\| (.*) \\|$")
	backticked := regexp.MustCompile("`([a-z_]+)`")
	rows := map[string]bool{}
	for _, m := range row.FindAllStringSubmatch(table, -1) {
		kind, severities := m[1], m[3]
		rows[kind] = true
		rule := RuleOf(kind)
		if rule == nil {
			t.Errorf("docs/diff.md has a row for %s, which no rule raises", kind)
			continue
		}
		var said []string
		for _, w := range backticked.FindAllStringSubmatch(severities, -1) {
			if _, err := ParseSeverity(w[1]); err == nil && !slices.Contains(said, w[1]) {
				said = append(said, w[1])
			}
		}
		var declared []string
		for _, s := range rule.Severities {
			declared = append(declared, s.String())
		}
		slices.Sort(said)
		slices.Sort(declared)
		if !slices.Equal(said, declared) {
			t.Errorf("%s: docs/diff.md names severities %v, its rule declares %v", kind, said, declared)
		}
	}
	for _, r := range Rules() {
		if !rows[r.Kind] {
			t.Errorf("%s has no row in docs/diff.md's findings table", r.Kind)
		}
	}
}

// Every rule is whole: a title, its severities lowest first, a function
// that raises it (persistence runs on the others' findings).
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

// coveredByTests names, for each kind that no fixture scenario raises (its
// evidence is an event log, a kernel log, a series or a live process's
// state), the test file of this package that raises it.
var coveredByTests = map[string]string{
	KindRenamedDeviceNode:     "rule_device_test.go",
	KindUnreadableProcess:     "rule_hidden_test.go",
	KindTransientGPUProcess:   "rule_transient_test.go",
	KindHiddenDeviceUse:       "rule_window_test.go",
	KindWindowNotCovered:      "rule_window_test.go",
	KindOutOfAllocation:       "rule_allocation_test.go",
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

// constName is the Go constant of a kind in this package: KindXxx.
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

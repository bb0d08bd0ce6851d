package diff

import (
	"cmp"
	"slices"
)

// A Rule is one finding kind, declared once in its rule's file, which
// registers what the docs, OCSF and triage say of it and the functions that
// raise it. A new kind is its rule's file and its scenario.
type Rule struct {
	Kind string
	// Title names the kind for a reader, as OCSF's finding title.
	Title string
	// Severities are those the rule may raise, lowest first, as
	// docs/diff.md's findings table names them.
	Severities []Severity
	// WithoutProcess says the kind is about memory, an NVML entry or a busy GPU
	// that no live process accounts for, triaged as a zombie context.
	WithoutProcess bool
	// GPUUse says the kind is about a live process's use of a GPU, so
	// persistence looks behind its process.
	GPUUse bool
	// Inheritable says the kind is about a device a process uses, which a
	// surviving process may have inherited from a tenant process by a fork
	// (attachInheritance names it).
	Inheritable bool
	// ByPID says the kind may name a process by PID alone, from a record that
	// no snapshot at either end matched, so the history may name it.
	ByPID bool

	// compare raise the kind in a diff, in order, and check raises it in a
	// check of a GPU set. Either may be nil, as persistence runs after the
	// others, on their findings.
	compare []func(*comparison) []Finding
	check   func(*comparison, *gpuSet) []Finding

	// Order places the rule among the others. A diff and a check run them
	// in ascending Order, and their notes come out in that order.
	Order int
}

// registered holds each rule as its file's declaration registers it.
var registered []*Rule

// register adds r to the registry. A rule's file calls it where it declares
// the rule, so a new kind touches no other file.
func register(r *Rule) *Rule {
	registered = append(registered, r)
	return r
}

// registry is every finding kind in Order, and rulesByKind indexes it. They
// are built in init, which runs after every file's declarations registered.
var (
	registry    []*Rule
	rulesByKind map[string]*Rule
)

func init() {
	registry = slices.SortedFunc(slices.Values(registered), func(a, b *Rule) int { return cmp.Compare(a.Order, b.Order) })
	rulesByKind = make(map[string]*Rule, len(registry))
	for _, r := range registry {
		rulesByKind[r.Kind] = r
	}
}

// Rules returns every finding kind's rule, in registry order.
func Rules() []*Rule { return registry }

// RuleOf returns the rule of kind, or nil for a kind diff does not raise.
func RuleOf(kind string) *Rule { return rulesByKind[kind] }

// ruleFor is RuleOf, and a rule with every property false for a kind diff
// does not raise.
func ruleFor(kind string) *Rule {
	if r := rulesByKind[kind]; r != nil {
		return r
	}
	return &Rule{Kind: kind}
}

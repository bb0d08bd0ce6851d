package diff

// A Rule is one finding kind, declared once in its rule's file: what the
// docs, OCSF and triage say of it, and the functions that raise it. A new
// kind is its rule's file, its entry in registry, and its scenario.
type Rule struct {
	Kind string
	// Title names the kind for a reader: OCSF's finding title.
	Title string
	// Severities are those the rule may raise, lowest first: docs/diff.md's
	// findings table names the same.
	Severities []Severity
	// WithoutProcess: the kind is about memory, an NVML entry or a busy GPU
	// that no live process accounts for, triaged as a zombie context.
	WithoutProcess bool
	// GPUUse: the kind is about a live process's use of a GPU, so
	// persistence looks behind its process.
	GPUUse bool
	// Inheritable: the kind is about a device a process uses, which a
	// surviving process may have inherited from a tenant process by a fork
	// (attachInheritance names it).
	Inheritable bool
	// ByPID: the kind may name a process by PID alone, from a record that
	// no snapshot at either end matched, so the history may name it.
	ByPID bool

	// compare raise the kind in a diff, in order; check raises it in a
	// check of a GPU set. Either may be nil: persistence runs after the
	// others, on their findings.
	compare []func(*comparison) []Finding
	check   func(*comparison, *gpuSet) []Finding
}

// registry is every finding kind, in the order a diff and a check run
// them: their notes come out in this order.
var registry = []*Rule{
	ruleLeftoverMapping,
	ruleLeftoverHolder,
	ruleOtherDeviceMapping,
	ruleRenamedDeviceNode,
	ruleUnexpectedGPUProcess,
	ruleUnreadableProcess,
	ruleHiddenProcess,
	ruleOrphanGPUProcess,
	ruleZombieGPUMemory,
	ruleTransientGPUProcess,
	ruleHiddenDeviceUse,
	ruleWindowNotCovered,
	ruleXidError,
	ruleForgedKernelMessage,
	ruleOutOfAllocation,
	ruleEgressConnection,
	ruleGPUBusyWithoutProcess,
	rulePersistence,
	ruleGPUInUse,
}

// rulesByKind indexes registry.
var rulesByKind = func() map[string]*Rule {
	m := make(map[string]*Rule, len(registry))
	for _, r := range registry {
		m[r.Kind] = r
	}
	return m
}()

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

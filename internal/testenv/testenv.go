// Package testenv is the one rule for where a test runs. `go test -short`
// runs what needs Go and gcc alone, in about a minute. A test that needs
// root, another tool, or minutes says so here and is skipped, with its
// reason, under -short or where the host lacks what it needs.
package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// NotShort skips the test under -short, saying why it is not short (a
// tool beyond Go and gcc, root, or its time).
func NotShort(t testing.TB, why string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("not short: %s (go test without -short runs it)", why)
	}
}

// Root skips the test under -short and unless it runs as root, naming
// what it does as root.
func Root(t testing.TB, why string) {
	t.Helper()
	NotShort(t, "needs root: "+why)
	if os.Geteuid() != 0 {
		t.Skipf("needs root: %s (run the tests as root, as .ci/run does)", why)
	}
}

// Tools skips the test under -short and where a tool is not on PATH (a
// name) or not there at all (a path).
func Tools(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		NotShort(t, "needs "+tool)
		if _, err := exec.LookPath(tool); err != nil {
			Missing(t, tool)
		}
	}
}

// Missing skips a test for what it needs and the host lacks. .ci/run
// installs what tests need, so CI's test summary fails on this skip.
func Missing(t testing.TB, what string) {
	t.Helper()
	t.Skipf("%s is not installed (.ci/run installs it)", what)
}

// Package prometheus holds gpusnap's Prometheus alerting rules; its test runs
// Prometheus' own rule checker and unit tests on them.
package prometheus

import (
	"os/exec"
	"testing"

	"github.com/gpusnap/gpusnap/internal/testenv"
)

// TestRules checks the rules and runs their unit tests with promtool, the
// rule engine Prometheus itself evaluates them with.
func TestRules(t *testing.T) {
	testenv.Tools(t, "promtool") // Debian package prometheus
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"check", "rules", "gpusnap-rules.yml"},
		{"test", "rules", "gpusnap-rules.test.yml"},
	} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}

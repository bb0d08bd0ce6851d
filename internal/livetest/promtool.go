package livetest

import (
	"bytes"
	"os/exec"
	"testing"
)

// PromtoolCheck lints a Prometheus exposition with Debian's promtool (package
// prometheus), as a scraper would judge it; without promtool it says so.
func PromtoolCheck(t testing.TB, exposition []byte) {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool not installed (Debian package prometheus): metrics not linted")
		return
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(exposition)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

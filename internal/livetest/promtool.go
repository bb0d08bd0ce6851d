package livetest

import (
	"bytes"
	"os/exec"
	"testing"

	"github.com/gpusnap/gpusnap/internal/testenv"
)

// PromtoolCheck lints a Prometheus exposition with Debian's promtool (package
// prometheus), as a scraper would judge it, in a subtest of its own. The
// subtest is skipped under -short, and where promtool is not installed.
func PromtoolCheck(t *testing.T, exposition []byte) {
	t.Helper()
	t.Run("promtool check metrics", func(t *testing.T) {
		testenv.Tools(t, "promtool")
		cmd := exec.Command("promtool", "check", "metrics")
		cmd.Stdin = bytes.NewReader(exposition)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool check metrics: %v\n%s", err, out)
		}
	})
}

package testenv

import (
	"fmt"
	"os"
	"runtime"
	"testing"
)

// Each skip says why: under -short that the test is not short, else what
// the host lacks, in the words CI's test summary looks for.
func TestSkipsSayWhy(t *testing.T) {
	cases := []struct {
		name string
		gate func(testing.TB)
		runs bool   // in this run, the test goes on
		says string // else its skip says this
	}{
		{"not short", func(t testing.TB) { NotShort(t, "slow") }, !testing.Short(), "not short: slow (go test without -short runs it)"},
		{"root", func(t testing.TB) { Root(t, "mounts") }, !testing.Short() && os.Geteuid() == 0, rootSays()},
		{"tool on PATH", func(t testing.TB) { Tools(t, "sh") }, !testing.Short(), "not short: needs sh (go test without -short runs it)"},
		{"missing tool", func(t testing.TB) { Tools(t, "gpusnap-no-such-tool") }, false, missingSays()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := &recorder{TB: t}
			ran := false
			done := make(chan struct{})
			go func() { // Skip ends its goroutine, as in a test
				defer close(done)
				c.gate(r)
				ran = true
			}()
			<-done
			if ran != c.runs || (!ran && r.skip != c.says) {
				t.Errorf("ran %v (want %v), skip %q (want %q)", ran, c.runs, r.skip, c.says)
			}
		})
	}
}

func rootSays() string {
	if testing.Short() {
		return "not short: needs root: mounts (go test without -short runs it)"
	}
	return "needs root: mounts (run the tests as root, as .ci/run does)"
}

func missingSays() string {
	if testing.Short() {
		return "not short: needs gpusnap-no-such-tool (go test without -short runs it)"
	}
	return "gpusnap-no-such-tool is not installed (.ci/run installs it)"
}

// recorder is a test whose skip is recorded, not taken.
type recorder struct {
	testing.TB
	skip string
}

func (r *recorder) Helper() {}

func (r *recorder) Skipf(format string, args ...any) {
	r.skip = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

package livetest

import (
	_ "embed"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// floodSource is the C helper of a tenant's open flood.
//
//go:embed helper/flood.c
var floodSource []byte

// BuildFlood compiles flood.c with gcc into a temporary directory.
func BuildFlood(t testing.TB) string {
	t.Helper()
	return buildC(t, "flood", floodSource)
}

// Flood is a flood started by StartFlood.
type Flood struct {
	cmd *exec.Cmd
	out strings.Builder
}

// StartFlood starts bin (BuildFlood) as user nobody (uid and gid 65534),
// opening and closing path n times at rate a second (0 for unpaced).
func StartFlood(t testing.TB, bin string, rate, n int, path string) *Flood {
	t.Helper()
	Require(t, "setpriv")
	f := &Flood{cmd: exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", bin, strconv.Itoa(rate), strconv.Itoa(n), path)}
	f.cmd.Stdout = &f.out
	if err := f.cmd.Start(); err != nil {
		t.Fatalf("livetest: flood: %v", err)
	}
	return f
}

// Wait waits for the flood's end and returns its PID and how many opens it
// made. The test fails where the flood failed.
func (f *Flood) Wait(t testing.TB) (pid int, opens uint64) {
	t.Helper()
	err := f.cmd.Wait()
	lines := strings.Fields(f.out.String())
	if err != nil || len(lines) != 2 {
		t.Fatalf("livetest: flood: %v, printed %q", err, f.out.String())
	}
	pid, _ = strconv.Atoi(lines[0])
	opens, _ = strconv.ParseUint(lines[1], 10, 64)
	return pid, opens
}

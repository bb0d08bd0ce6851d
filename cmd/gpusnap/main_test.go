package main

import (
	"bytes"
	"context"
	"testing"
)

// gpusnap runs the CLI in-process with exactly the arguments given and
// returns its exit status and output.
func gpusnap(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), append([]string{"gpusnap"}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestStoreWithoutCommandIsUsageError(t *testing.T) {
	code, _, stderr := gpusnap(t, "store", "--db", t.TempDir()+"/s.db")
	if code != exitError || stderr != "gpusnap: usage: store needs a command: gpusnap store check\n" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}

func TestUnknownCommandIsUsageError(t *testing.T) {
	code, _, stderr := gpusnap(t, "snapshots")
	if code != exitError || stderr == "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}

func TestVersionOverride(t *testing.T) {
	defer func(v string) { version = v }(version)
	version = "1.2.3"
	code, stdout, _ := gpusnap(t, "--version")
	if code != 0 || stdout != "gpusnap version 1.2.3\n" {
		t.Fatalf("exit %d, stdout %q", code, stdout)
	}
	version = ""
	if v := buildVersion(); v == "" {
		t.Fatal("buildVersion is empty without -X main.version")
	}
}

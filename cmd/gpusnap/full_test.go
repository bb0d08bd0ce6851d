package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/internal/testenv"
)

// buildTagged builds this command with the tags given into path, as make
// builds the release binaries.
func buildTagged(t *testing.T, tags, path string) {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = "/usr/local/go/bin/go" // where .ci/run finds the toolchain when PATH lacks it
	}
	if out, err := exec.Command(gobin, "build", "-tags", tags, "-o", path, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build -tags %s: %v\n%s", tags, err, out)
	}
}

// runBin runs a built gpusnap and returns its exit status and stderr.
func runBin(t *testing.T, bin string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("%s: %v", bin, err)
	}
	return cmd.ProcessState.ExitCode(), stderr.String()
}

// The common gpusnap (gpusnap_common) hands nri and watch --listen to
// gpusnap-full beside it or in ../libexec/gpusnap, with their arguments: the
// command's own error reaches the operator, and so does a usage error, word
// for word as gpusnap-full says it. Without gpusnap-full it exits 2 naming
// both places, and a watch without --listen still runs in the common build.
func TestCommonRunsNRIInFull(t *testing.T) {
	testenv.NotShort(t, "builds gpusnap twice")
	root := t.TempDir()
	bin, libexec := filepath.Join(root, "bin"), filepath.Join(root, "libexec", "gpusnap")
	if err := os.MkdirAll(libexec, 0o755); err != nil {
		t.Fatal(err)
	}
	common, full := filepath.Join(bin, "gpusnap"), filepath.Join(bin, "gpusnap-full")
	buildTagged(t, "urfave_cli_no_docs,gpusnap_common", common)
	buildTagged(t, "urfave_cli_no_docs", full)
	sock := filepath.Join(root, "no-nri.sock")
	plugin := []string{"nri", "--socket", sock, "--evidence-dir", filepath.Join(root, "evidence")}

	code, stderr := runBin(t, common, plugin...)
	if code != exitError || !strings.Contains(stderr, "gpusnap: nri "+sock+": failed to connect to NRI service") {
		t.Errorf("gpusnap nri beside gpusnap-full: exit %d, want 2 from the plugin's dial\n%s", code, stderr)
	}
	bad := []string{"nri", "--reap-grace", "-1s"}
	code, stderr = runBin(t, common, bad...)
	fullCode, fullStderr := runBin(t, full, bad...)
	if code != fullCode || stderr != fullStderr || fullCode != exitError {
		t.Errorf("gpusnap nri --reap-grace -1s: exit %d %q, gpusnap-full's exit %d %q", code, stderr, fullCode, fullStderr)
	}
	for _, args := range [][]string{
		{"watch", "--listen", "127.0.0.1:0", "--mode", "bogus"},                           // gpusnap-full's usage error
		{"--db", filepath.Join(root, "store.db"), "watch", "--listen", "127.0.0.1:99999"}, // gpusnap-full's listener
	} {
		code, stderr = runBin(t, common, args...)
		fullCode, fullStderr = runBin(t, full, args...)
		if code != fullCode || stderr != fullStderr || fullCode != exitError || !strings.Contains(stderr, "--") {
			t.Errorf("gpusnap %v: exit %d %q, gpusnap-full's exit %d %q", args, code, stderr, fullCode, fullStderr)
		}
	}

	if err := os.Rename(full, filepath.Join(libexec, "gpusnap-full")); err != nil {
		t.Fatal(err)
	}
	if code, stderr := runBin(t, common, plugin...); code != exitError || !strings.Contains(stderr, "failed to connect to NRI service") {
		t.Errorf("gpusnap nri with gpusnap-full in ../libexec/gpusnap: exit %d\n%s", code, stderr)
	}

	kept := filepath.Join(t.TempDir(), "gpusnap-full")
	if err := os.Rename(filepath.Join(libexec, "gpusnap-full"), kept); err != nil {
		t.Fatal(err)
	}
	code, stderr = runBin(t, common, plugin...)
	if code != exitError || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "nri runs in gpusnap-full, which cannot be run") ||
		!strings.Contains(stderr, filepath.Join(bin, "gpusnap-full")) || !strings.Contains(stderr, filepath.Join(bin, "..", "libexec", "gpusnap", "gpusnap-full")) {
		t.Errorf("gpusnap nri without gpusnap-full: exit %d, want 2 and one line naming both paths\n%s", code, stderr)
	}
	if code, stderr := runBin(t, common, "--version"); code != exitClean {
		t.Errorf("gpusnap --version without gpusnap-full: exit %d\n%s", code, stderr)
	}
	code, stderr = runBin(t, common, "watch", "--listen", "127.0.0.1:0")
	if code != exitError || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "watch runs in gpusnap-full, which cannot be run") {
		t.Errorf("gpusnap watch --listen without gpusnap-full: exit %d, want 2 and one line\n%s", code, stderr)
	}
	code, stderr = runBin(t, common, "watch", "--mode", "bogus")
	if code != exitError || !strings.Contains(stderr, `--mode "bogus"`) {
		t.Errorf("gpusnap watch --mode bogus without gpusnap-full: exit %d, want its own usage error\n%s", code, stderr)
	}
	refusesFull(t, common, bin, kept, plugin)
}

// refusesFull plants gpusnap-full beside common as another user could, and
// as an operator's mistake would, and wants exit 2 and one line saying why
// each time, never the planted file run.
func refusesFull(t *testing.T, common, bin, full string, plugin []string) {
	if os.Geteuid() != 0 {
		t.Skip("gpusnap-full's owner: needs root to chown a planted copy")
	}
	planted := filepath.Join(bin, "gpusnap-full")
	plant := func(src string, mode os.FileMode, uid int) {
		t.Helper()
		data, err := os.ReadFile(src)
		if err == nil {
			os.Remove(planted)
			err = os.WriteFile(planted, data, mode)
		}
		if err == nil {
			err = os.Chmod(planted, mode) // past the umask
		}
		if err == nil {
			err = os.Chown(planted, uid, uid)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	refused := func(what, why string) {
		t.Helper()
		code, stderr := runBin(t, common, plugin...)
		if code != exitError || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, why) {
			t.Errorf("gpusnap nri with %s: exit %d, want 2 and one line saying %q\n%s", what, code, why, stderr)
		}
	}
	plant(full, 0o755, 65534)
	refused("a gpusnap-full owned by uid 65534", "owned by uid 65534")
	plant(full, 0o757, 0)
	refused("a gpusnap-full others may write", "writable by its group or others")
	plant(full, 0o755, 0)
	if err := os.Chmod(bin, 0o777); err != nil {
		t.Fatal(err)
	}
	refused("gpusnap-full in a directory others may write", "who could replace what it holds")
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	plant(common, 0o755, 0)
	refused("the common build installed as gpusnap-full", "is gpusnap's common build installed under that name")
}

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/urfave/cli/v2"

	"github.com/gpusnap/gpusnap/internal/livetest"
	"github.com/gpusnap/gpusnap/internal/scenariodir"
)

// gpusnapProcessEnv, set to 1, makes the test binary gpusnap itself, its
// arguments gpusnap's (gpusnapProc).
const gpusnapProcessEnv = "GPUSNAP_TEST_PROCESS"

func TestMain(m *testing.M) {
	if os.Getenv(gpusnapProcessEnv) == "1" {
		// SIGTERM and SIGINT cancel the command, as main has them.
		ctx, _ := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		os.Exit(run(ctx, append([]string{"gpusnap"}, os.Args[1:]...), os.Stdout, os.Stderr))
	}
	// A command given no --db uses the default store: as root the host's
	// own, /var/lib/gpusnap/gpusnap.db, which check and the snapshots of
	// these tests wrote. They get one of the package's instead (GPUSNAP_DB,
	// inherited by the gpusnap processes tests start).
	dir, err := os.MkdirTemp("", "gpusnap-cmd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	os.Setenv("GPUSNAP_DB", filepath.Join(dir, "gpusnap.db"))
	scenarioCwd = filepath.Join(dir, "tree", "cmd", "gpusnap")
	if scenarios, err = scenariodir.NewCache(scenarioRoot, filepath.Join(dir, "tree", "fixtures", "scenarios")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

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
	if code != exitError || stderr != "gpusnap: usage: store needs a command: gpusnap store check, checkpoint or verify\n" {
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
	defer func(v, c, d string) { version, commit, buildDate = v, c, d }(version, commit, buildDate)
	version, commit, buildDate = "1.2.3", "0123456789abcdef", "2026-12-01T10:00:00Z"
	code, stdout, _ := gpusnap(t, "--version")
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	want := []string{"gpusnap version 1.2.3", "commit:       0123456789abcdef", "built:        2026-12-01T10:00:00Z",
		"go:           " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH}
	if code != 0 || len(lines) != 5 || !slices.Equal(lines[:4], want) || !strings.HasPrefix(lines[4], "libnvidia-ml: ") {
		t.Fatalf("exit %d, stdout %q, want %q and a libnvidia-ml line", code, stdout, want)
	}
	version, commit = "", ""
	if v := buildVersion(); v == "" {
		t.Fatal("buildVersion is empty without -X main.version")
	}
	if c := buildCommit(); c == "" {
		t.Fatal("buildCommit is empty without -X main.commit")
	}
}

// TestVersionNVML: --version says whether libnvidia-ml is found, by loading
// it only: a library whose nvmlInit never returns is found, and --version
// still exits at once.
func TestVersionNVML(t *testing.T) {
	dir := livetest.HungNVML(t)
	cmd := gpusnapProc("--version")
	cmd.Env = append(cmd.Env, "LD_LIBRARY_PATH="+dir)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	hung := time.AfterFunc(20*time.Second, func() { _ = cmd.Process.Kill() })
	err := cmd.Wait()
	hung.Stop()
	out := stdout.Bytes()
	if err != nil || !strings.Contains(string(out), "\nlibnvidia-ml: found\n") {
		t.Fatalf("--version with %s/libnvidia-ml.so.1: %v\n%s", dir, err, out)
	}
	out, err = gpusnapProc("--version").Output()
	if err != nil || !regexp.MustCompile(`\nlibnvidia-ml: (found|not found \(.*libnvidia-ml\.so\.1.*\))\n$`).Match(out) {
		t.Fatalf("--version: %v\n%s", err, out)
	}
}

// terminalSafe reports whether s holds no raw escape or bell byte and is valid
// UTF-8 (a hostile byte written raw is not). strings.ContainsAny will not do:
// it reads its set as runes, so a "\xff" in the set matches U+FFFD, not the byte.
func terminalSafe(s string) bool {
	return !strings.ContainsAny(s, "\x1b\a") && utf8.ValidString(s)
}

// oneLine checks an error exit: status 2, one line on stderr holding want,
// no raw control byte, nothing on stdout.
func oneLine(t *testing.T, args []string, code int, stdout, stderr, want string) {
	t.Helper()
	if code != exitError || strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, "gpusnap: ") ||
		!strings.Contains(stderr, want) || stdout != "" || !terminalSafe(stderr) {
		t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and one line with %q", args, code, stdout, stderr, want)
	}
}

// oneSnapshot stores a snapshot of a tiny host in a new store and returns the
// store, the global flags naming both, and the snapshot's id.
func oneSnapshot(t *testing.T) (db string, g []string, id string) {
	t.Helper()
	db = filepath.Join(t.TempDir(), "gpusnap.db")
	g = storeArgs(t, db)
	code, out, errs := gpusnap(t, append([]string{"snapshot"}, g...)...)
	if code != 0 {
		t.Fatal(errs)
	}
	return db, g, lastLine(out)
}

// TestCommandsRefuseExtraArguments: a stray word is a usage error, not
// silently dropped: `baseline --tenant job 42` must not store tenant "job".
// Nothing stored before is lost, and nothing new is stored.
func TestCommandsRefuseExtraArguments(t *testing.T) {
	_, g, first := oneSnapshot(t)
	key := filepath.Join(t.TempDir(), "k")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"snapshot", "extra"}, `snapshot takes no arguments, got "extra"`},
		{[]string{"baseline", "--tenant", "job", "42"}, `baseline takes no arguments, got "42"`},
		{[]string{"list", "x"}, `list takes no arguments`},
		{[]string{"ps", "1234"}, `ps takes no arguments`},
		{[]string{"prune", "--keep-last", "1", "x"}, `prune takes no arguments`},
		{[]string{"store", "check", "x"}, `store check takes no arguments`},
		{[]string{"keygen", "-o", key, "x"}, `keygen takes no arguments`},
	} {
		args := append(c.args, g...)
		code, out, errs := gpusnap(t, args...)
		oneLine(t, args, code, out, errs, c.want)
	}
	if _, err := os.Stat(key + ".key"); err == nil {
		t.Error("keygen with a stray argument wrote a key")
	}
	code, list, errs := gpusnap(t, append([]string{"list", "--json"}, g...)...)
	if code != 0 || strings.Count(list, `"id"`) != 1 || !strings.Contains(list, first) {
		t.Errorf("after the refused commands the store holds:\n%s%s", list, errs)
	}
}

// TestFlagErrorsSayWhatWasWrong: the flag package's own messages ("-x",
// "parse error") are rewritten in gpusnap's words, and a lock timeout that
// is not positive (the store would read 0 as its default) is refused.
func TestFlagErrorsSayWhatWasWrong(t *testing.T) {
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--bogus", "list"}, "usage: unknown flag --bogus"},
		{[]string{"list", "--bogus"}, "usage: unknown flag --bogus"},
		{[]string{"baseline", "--tenant"}, "usage: --tenant needs a value"},
		{[]string{"--lock-timeout", "5", "list"}, `usage: --lock-timeout: "5" is not a duration (10s, 1m30s, 720h)`},
		{[]string{"list", "--lock-timeout", "5"}, `usage: --lock-timeout: "5" is not a duration`},
		{[]string{"list", "--lock-timeout", "0"}, "usage: --lock-timeout 0s: want a positive duration"},
		{[]string{"list", "--lock-timeout=-1s"}, "usage: --lock-timeout -1s: want a positive duration"},
		{[]string{"prune", "--keep-last", "x"}, `usage: --keep-last: "x" is not a whole number`},
		{[]string{"prune", "--older-than", "3days"}, `usage: --older-than: "3days" is not a duration`},
		{[]string{"list", "--json=maybe"}, `usage: --json: "maybe" is neither true nor false`},
		{[]string{"list", "--hash-limit", "lots"}, `usage: --hash-limit: "lots" is not a size`},
		{[]string{"list", "--hash-limit", "0"}, "usage: --hash-limit: want a positive size"},
	} {
		args := append([]string{"--db", db}, c.args...)
		code, out, errs := gpusnap(t, args...)
		oneLine(t, args, code, out, errs, c.want)
	}
	t.Setenv("GPUSNAP_LOCK_TIMEOUT", "0s")
	code, out, errs := gpusnap(t, "list", "--db", db)
	oneLine(t, []string{"GPUSNAP_LOCK_TIMEOUT=0s", "list"}, code, out, errs, "want a positive duration")
}

// TestErrorLineIsTerminalSafe: an error that quotes an operator's argument
// escapes what is in it; what a message already quoted keeps its escapes.
func TestErrorLineIsTerminalSafe(t *testing.T) {
	hostile := "/nonexistent/\x1b]0;pwned\a\xff\x1b[2J"
	code, out, errs := gpusnap(t, "verify", hostile)
	oneLine(t, []string{"verify", hostile}, code, out, errs, `/nonexistent/\x1b]0;pwned\x07\xff\x1b[2J: no such file`)
	code, out, errs = gpusnap(t, "list", "--\x1b[2J")
	oneLine(t, []string{"list", "--\x1b[2J"}, code, out, errs, `unknown flag --\x1b[2J`)
	code, out, errs = gpusnap(t, "--db", filepath.Join(t.TempDir(), "s.db"), "baseline", "--tenant", "a", "\x1b[2J")
	oneLine(t, []string{"baseline", "\x1b[2J"}, code, out, errs, `got "\x1b[2J"`)
}

// TestDefaultDBIgnoresRelativeXDGStateHome: the XDG spec says a relative
// path in the variable is invalid and ignored.
func TestDefaultDBIgnoresRelativeXDGStateHome(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	for xdg, want := range map[string]string{
		"":               filepath.Join(home, ".local", "state", "gpusnap", "gpusnap.db"),
		"relative/state": filepath.Join(home, ".local", "state", "gpusnap", "gpusnap.db"),
		"/srv/state":     "/srv/state/gpusnap/gpusnap.db",
	} {
		t.Setenv("XDG_STATE_HOME", xdg)
		if got, err := defaultDB(1000); err != nil || got != want {
			t.Errorf("XDG_STATE_HOME=%q: %q, %v; want %q", xdg, got, err, want)
		}
	}
	if got, _ := defaultDB(0); got != "/var/lib/gpusnap/gpusnap.db" {
		t.Errorf("root: %q", got)
	}
}

// TestEveryCommandHelpHasExamples: `gpusnap COMMAND --help` shows examples
// for every command and subcommand, as the README promises.
func TestEveryCommandHelpHasExamples(t *testing.T) {
	var check func(path []string, cmds []*cli.Command)
	check = func(path []string, cmds []*cli.Command) {
		for _, cmd := range cmds {
			args := append(append(slices.Clone(path), cmd.Name), "--help")
			code, out, errs := gpusnap(t, args...)
			if code != 0 || !strings.Contains(out, "Example") || errs != "" {
				t.Errorf("%q: exit %d, stderr %q, no examples in:\n%s", args, code, errs, out)
			}
			check(args[:len(args)-1], cmd.Subcommands)
		}
	}
	check(nil, newApp(io.Discard, io.Discard).Commands)
}

// TestInterruptedSaysSo: a command stopped by SIGINT or SIGTERM (its context
// canceled) says "interrupted", not "context canceled", and stores nothing.
func TestInterruptedSaysSo(t *testing.T) {
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errOut bytes.Buffer
	code := run(ctx, append([]string{"gpusnap", "snapshot"}, storeArgs(t, db)...), &out, &errOut)
	if code != exitError || errOut.String() != "gpusnap: interrupted\n" || out.Len() != 0 {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out.String(), errOut.String())
	}
	if _, err := os.Stat(db); err == nil {
		t.Error("an interrupted snapshot created the store")
	}
}

// panicWriter is a stdout whose write panics, standing in for any bug.
type panicWriter struct{}

func (panicWriter) Write([]byte) (int, error) { panic("write to a closed\nstream") }

// TestPanicIsOneErrorLine: a panic in a command is one line on stderr and
// exit 2, never a stack trace.
func TestPanicIsOneErrorLine(t *testing.T) {
	var errOut bytes.Buffer
	code := run(context.Background(), []string{"gpusnap", "ps", "--proc-root", quietHost(t), "--no-nvml"}, panicWriter{}, &errOut)
	e := errOut.String()
	if code != exitError || !strings.HasPrefix(e, "gpusnap: internal error: ") || !strings.Contains(e, "write to a closed stream") ||
		!strings.HasSuffix(e, "(a bug in gpusnap: please report it with the command line)\n") || strings.Count(e, "\n") != 1 {
		t.Errorf("exit %d, stderr %q", code, errOut.String())
	}
}

// TestEmptyPathIsUsageError: `--proc-root "$ROOT"` with ROOT unset must not
// read the live /proc in its place (nor the real NVML, nor the default store).
func TestEmptyPathIsUsageError(t *testing.T) {
	for _, args := range [][]string{
		{"ps", "--proc-root", "", "--no-nvml"},
		{"--proc-root=", "snapshot", "--no-store"},
		{"snapshot", "--no-store", "--nvml-fixture", ""},
		{"list", "--db", ""},
	} {
		code, out, errs := gpusnap(t, args...)
		oneLine(t, args, code, out, errs, "is empty")
	}
	t.Setenv("GPUSNAP_DB", "")
	code, out, errs := gpusnap(t, "list")
	oneLine(t, []string{"GPUSNAP_DB=", "list"}, code, out, errs, "usage: --db is empty")
}

// TestFlagBeatsEnvironment: a global flag on the command line, before the
// command, after it or on a parent command, wins over its environment
// variable; the variable alone is used.
func TestFlagBeatsEnvironment(t *testing.T) {
	db, g, id := oneSnapshot(t)
	t.Setenv("GPUSNAP_DB", filepath.Join(t.TempDir(), "other.db"))
	t.Setenv("GPUSNAP_PROC_ROOT", filepath.Join(t.TempDir(), "missing"))
	t.Setenv("GPUSNAP_LOCK_TIMEOUT", "1ms")
	for _, args := range [][]string{
		{"--db", db, "list"},
		{"list", "--db", db},
		{"store", "check", "--db", db},
		{"store", "--db", db, "check"},
		{"show", id, "--db", db},
		{"snapshot", "--no-store", "--no-nvml", "--proc-root", g[3]},
		{"--proc-root", g[3], "ps", "--no-nvml"},
		{"list", "--lock-timeout", "0"}, // the flag's 0 is refused, not the variable's 1ms used
	} {
		code, out, errs := gpusnap(t, args...)
		switch {
		case args[1] == "--lock-timeout":
			oneLine(t, args, code, out, errs, "--lock-timeout 0s")
		case code != 0:
			t.Errorf("%q: exit %d, stderr %q", args, code, errs)
		}
	}
	t.Setenv("GPUSNAP_DB", db)
	if code, out, errs := gpusnap(t, "list"); code != 0 || !strings.Contains(out, id) {
		t.Errorf("GPUSNAP_DB alone: exit %d, %q %q", code, out, errs)
	}
}

// TestHelpCommand: `gpusnap help [COMMAND...]` prints what --help does.
func TestHelpCommand(t *testing.T) {
	for _, cmd := range [][]string{{}, {"diff"}, {"store", "check"}} {
		code, got, errs := gpusnap(t, append([]string{"help"}, cmd...)...)
		_, want, _ := gpusnap(t, append(cmd, "--help")...)
		if code != 0 || got != want || !strings.Contains(got, "USAGE") || errs != "" {
			t.Errorf("help %q: exit %d, stderr %q, output %q; want %q", cmd, code, errs, got, want)
		}
	}
}

// quietHost is a proc root of one process that uses no device: a host with
// nothing to report.
func quietHost(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	stat := "1 (init) S 0 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 10 0 0\n"
	if err := os.WriteFile(filepath.Join(root, "1", "stat"), []byte(stat), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

// A --proc-root with no process in it (a mistyped path) is an error, not an
// empty baseline that would hide everything a later diff finds.
func TestProcRootWithoutProcessesIsAnError(t *testing.T) {
	dir := t.TempDir()
	code, _, stderr := gpusnap(t, "baseline", "--tenant", "t", "--db", filepath.Join(t.TempDir(), "s.db"), "--no-nvml", "--proc-root", dir)
	if code != exitError || stderr != "gpusnap: proc root: "+dir+" holds no process directories (is it a /proc?)\n" {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}

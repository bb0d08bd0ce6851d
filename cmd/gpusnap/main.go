// Command gpusnap snapshots the GPU-relevant state of a shared NVIDIA GPU host
// and diffs it, to find what a tenant's job left behind.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/gpusnap/gpusnap/capture"
	"github.com/gpusnap/gpusnap/internal/lazyregexp"
	"github.com/gpusnap/gpusnap/internal/safetext"
)

// Exit statuses, as diff(1) has them.
const (
	exitClean    = 0 // ran, found nothing at or above --fail-on
	exitFindings = 1 // ran, found something at or above --fail-on
	exitError    = 2 // bad usage, unreadable store, bad fixture ...
)

func main() {
	// A command lives tens of milliseconds and its heap is a few MB, so
	// collecting it while a capture grows it is work thrown away at exit.
	// Set here, not in run, so in-process tests keep the runtime's default.
	debug.SetGCPercent(400)
	// On a host of tens of thousands of processes that headroom is tens of
	// MiB of garbage. Past 64 MiB the collector runs as the heap needs, so
	// peak memory grows with what is live. An operator's GOMEMLIMIT stands
	// (docs/performance-notes.md, "Peak memory").
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(64 << 20)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the whole CLI, which tests call in-process with their own writers.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) (code int) {
	// A bug must not hand an operator a stack trace in place of the one line
	// a script reads. It is reported as an error, exit 2, naming the panic.
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "gpusnap: internal error: %s (a bug in gpusnap: please report it with the command line)\n",
				safetext.Line(strings.ReplaceAll(fmt.Sprint(r), "\n", " ")))
			code = exitError
		}
	}()
	if len(args) > 1 && args[1] == "help" {
		// `gpusnap help [COMMAND...]` is how many operators ask for --help.
		args = append(append([]string{args[0]}, args[2:]...), "--help")
	}
	app := newApp(stdout, stderr)
	unknown := false
	app.CommandNotFound = func(_ *cli.Context, name string) {
		fmt.Fprintf(stderr, "gpusnap: unknown command %q (see gpusnap --help)\n", name)
		unknown = true
	}
	err := app.RunContext(ctx, permuteArgs(app, args))
	if unknown && err == nil {
		return exitError
	}
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		err = errors.New("interrupted")
	}
	return exitCode(err, stderr)
}

// exitCode turns what a command returned into an exit status, printing the one
// error line an operator sees. The line is escaped for the terminal, since
// it can quote a path or an argument with control characters in it.
func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return exitClean
	}
	var st statusError
	if errors.As(err, &st) {
		return st.code
	}
	msg := safetext.Line(strings.ReplaceAll(err.Error(), "\n", " "))
	fmt.Fprintf(stderr, "gpusnap: %s\n", msg)
	return exitError
}

// statusError ends a command with an exit status and no message. A diff
// that found something exits 1 having said all it had to say on stdout.
type statusError struct{ code int }

func (e statusError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func newApp(stdout, stderr io.Writer) *cli.App {
	version := buildVersion()
	capture.Version = version
	cli.VersionPrinter = printVersion
	app := &cli.App{
		Name:    "gpusnap",
		Usage:   "snapshot and diff a shared NVIDIA GPU host, to find what a tenant left behind",
		Version: version,
		Description: "Run `gpusnap baseline --tenant T` before a tenant's job and `gpusnap diff --tenant T` after it:\n" +
			"the diff reports device mappings, open device handles, GPU memory and GPU processes left behind.\n" +
			"Exit status: 0 clean, 1 findings at or above --fail-on, 2 error.",
		Writer:               stdout,
		ErrWriter:            stderr,
		Flags:                globalFlags(),
		EnableBashCompletion: false,
		HideHelpCommand:      true,
		Suggest:              true,
		// Errors are printed once, by exitCode, so urfave must not exit the process itself.
		ExitErrHandler: func(*cli.Context, error) {},
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return flagError(globalFlags(), err)
		},
		Commands: []*cli.Command{
			snapshotCommand(),
			baselineCommand(),
			diffCommand(),
			checkCommand(),
			listCommand(),
			showCommand(),
			rmCommand(),
			pruneCommand(),
			storeCommand(),
			psCommand(),
			bundleCommand(),
			verifyCommand(),
			keygenCommand(),
			watchCommand(),
			eventsCommand(),
			completionCommand(),
			nriCommand(),
			reapCommand(),
		},
	}
	app.Commands = append(app.Commands, docCommands()...)
	for _, cmd := range app.Commands {
		withGlobalFlags(cmd, cmd.Name)
	}
	return app
}

// takesArgs are the commands that take arguments (snapshot ids, a file). Every
// other command refuses them, so a mistyped `gpusnap baseline --tenant job 42`
// must fail, not store a baseline of tenant "job".
var takesArgs = map[string]bool{"diff": true, "show": true, "rm": true, "bundle": true, "verify": true, "completion": true, "man": true}

// withGlobalFlags lets the global flags stand after the subcommand too, as
// operators type them (`gpusnap diff --tenant T --db X`), and makes a
// command that takes no arguments refuse them.
func withGlobalFlags(cmd *cli.Command, name string) {
	cmd.Flags = append(cmd.Flags, withoutEnv(globalFlags())...)
	cmd.OnUsageError = func(_ *cli.Context, err error, _ bool) error { return flagError(cmd.Flags, err) }
	cmd.HideHelpCommand = true // `gpusnap store help` is not a command, --help is
	if action := cmd.Action; action != nil && len(cmd.Subcommands) == 0 && !takesArgs[name] {
		cmd.Action = func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usageError(fmt.Errorf("%s takes no arguments, got %q", name, c.Args().First()))
			}
			return action(c)
		}
	}
	for _, sub := range cmd.Subcommands {
		withGlobalFlags(sub, name+" "+sub.Name)
	}
}

// withoutEnv drops the environment variables of a command's copy of the
// global flags. Read there, GPUSNAP_DB would count as set on the command and
// win over a --db given before it, or after it on a parent (`store --db X
// check`). Read once, on the app, a flag on the command line always wins.
func withoutEnv(flags []cli.Flag) []cli.Flag {
	for _, f := range flags {
		switch f := f.(type) {
		case *cli.StringFlag:
			f.EnvVars = nil
		case *cli.DurationFlag:
			f.EnvVars = nil
		}
	}
	return flags
}

func usageError(err error) error { return fmt.Errorf("usage: %w", err) }

// The flag package's own messages name a flag with one dash and call a bad
// duration a "parse error". flagError says what was wrong the way gpusnap's
// own messages do.
var (
	flagUndefined = lazyregexp.New(`^flag provided but not defined: -+(.*)$`)
	flagNoValue   = lazyregexp.New(`^flag needs an argument: -+(.*)$`)
	flagBadValue  = lazyregexp.New(`^invalid value (".*") for flag -+([^:]*): `)
	flagBadBool   = lazyregexp.New(`^invalid boolean value (".*") for -+([^:]*): `)
)

// flagError turns an error from parsing the flags defs into a usage error.
func flagError(defs []cli.Flag, err error) error {
	msg := err.Error()
	if m := flagUndefined().FindStringSubmatch(msg); m != nil {
		return usageError(fmt.Errorf("unknown flag --%s (see --help)", m[1]))
	}
	if m := flagNoValue().FindStringSubmatch(msg); m != nil {
		return usageError(fmt.Errorf("--%s needs a value", m[1]))
	}
	if m := flagBadBool().FindStringSubmatch(msg); m != nil {
		return usageError(fmt.Errorf("--%s: %s is neither true nor false", m[2], m[1]))
	}
	if m := flagBadValue().FindStringSubmatch(msg); m != nil {
		want := "valid"
		for _, f := range defs {
			if !slices.Contains(f.Names(), m[2]) {
				continue
			}
			switch f.(type) {
			case *cli.DurationFlag:
				want = "a duration (10s, 1m30s, 720h)"
			case *cli.IntFlag:
				want = "a whole number"
			}
		}
		return usageError(fmt.Errorf("--%s: %s is not %s", m[2], m[1], want))
	}
	return usageError(err)
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpusnap/gpusnap/capture"
	"github.com/gpusnap/gpusnap/internal/safetext"
	"github.com/gpusnap/gpusnap/nvmlread"
	"github.com/gpusnap/gpusnap/session"
	"github.com/gpusnap/gpusnap/snapshot"
)

// globalFlags are the flags every command takes, before or after its name
// (docs/spec.md, Global flags).
func globalFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "db", EnvVars: []string{"GPUSNAP_DB"}, Usage: "the bbolt store `PATH` (default: /var/lib/gpusnap/gpusnap.db as root, else $XDG_STATE_HOME/gpusnap/gpusnap.db)"},
		&cli.StringFlag{Name: "proc-root", EnvVars: []string{"GPUSNAP_PROC_ROOT"}, Value: "/proc", Usage: "read processes from `DIR`, laid out like /proc"},
		&cli.StringFlag{Name: "sys-root", EnvVars: []string{"GPUSNAP_SYS_ROOT"}, Usage: "read accelerators other than NVIDIA's from `DIR`, laid out like /sys (default: /sys with the live /proc, none with another --proc-root)"},
		&cli.StringFlag{Name: "nvml-fixture", EnvVars: []string{"GPUSNAP_NVML_FIXTURE"}, Usage: "replay NVML state from JSON `FILE` instead of libnvidia-ml"},
		&cli.BoolFlag{Name: "no-nvml", Usage: "skip NVML"},
		&cli.BoolFlag{Name: "require-nvml", Usage: "exit 2 when NVML cannot be read"},
		&cli.BoolFlag{Name: "json", Usage: "machine-readable output on stdout"},
		&cli.StringFlag{Name: "capture", EnvVars: []string{"GPUSNAP_CAPTURE"}, Value: "auto", Usage: "how to read processes (`HOW`): auto (BPF iterators where the kernel loads them, else /proc), bpf, or proc"},
		&cli.DurationFlag{Name: "nvml-timeout", EnvVars: []string{"GPUSNAP_NVML_TIMEOUT"}, Value: 10 * time.Second, Usage: "give up on a libnvidia-ml that does not answer after `DUR`: the snapshot records \"timed out\" and goes on"},
		&cli.DurationFlag{Name: "lock-timeout", EnvVars: []string{"GPUSNAP_LOCK_TIMEOUT"}, Value: session.DefaultLockTimeout, Usage: "how long to wait for another gpusnap holding the store (`DUR`: 10s, 500ms)"},
		&cli.StringFlag{Name: "hash-limit", EnvVars: []string{"GPUSNAP_HASH_LIMIT"}, Value: sizeText(capture.DefaultHashLimit), Usage: "hash the executable of a GPU-using process only up to `SIZE` (larger: hash_status too_large)"},
		&cli.StringFlag{Name: "unit-root", EnvVars: []string{"GPUSNAP_UNIT_ROOT"}, Usage: "read systemd's unit files (Restart=, timers) under `DIR` instead of / (an image, a test; default: / with the live /proc, none with another --proc-root)"},
		&cli.StringFlag{Name: "kmsg", EnvVars: []string{"GPUSNAP_KMSG"}, Usage: "the kernel log: /dev/kmsg, or a `FILE` of records in its format (default: /dev/kmsg with the live /proc, none with another --proc-root)"},
	}
}

// globals are the global flags, wherever on the command line they stood.
type globals struct {
	DB          string
	ProcRoot    string
	SysRoot     string // --sys-root, where "" lets capture pick (see capture.Options.SysRoot)
	Capture     string // capture.Options.Path
	NVMLFixture string
	NoNVML      bool
	RequireNVML bool
	JSON        bool
	LockTimeout time.Duration
	NVMLTimeout time.Duration
	KernelLog   string // --kmsg, where "" lets capture and diff pick (see capture.Options.KernelLog)
	UnitRoot    string // --unit-root, where "" lets capture pick (see capture.Options.UnitRoot)
	HashLimit   int64  // --hash-limit, bytes
	Stdout      io.Writer
	Stderr      io.Writer
	// Trace is the session's trace the command's context carries (a
	// test's), nil when none.
	Trace *session.Trace
}

func loadGlobals(c *cli.Context) (globals, error) {
	g := globals{
		DB:          lookup(c, "db", (*cli.Context).String),
		ProcRoot:    lookup(c, "proc-root", (*cli.Context).String),
		SysRoot:     lookup(c, "sys-root", (*cli.Context).String),
		Capture:     lookup(c, "capture", (*cli.Context).String),
		NVMLFixture: lookup(c, "nvml-fixture", (*cli.Context).String),
		NoNVML:      lookup(c, "no-nvml", (*cli.Context).Bool),
		RequireNVML: lookup(c, "require-nvml", (*cli.Context).Bool),
		JSON:        lookup(c, "json", (*cli.Context).Bool),
		LockTimeout: lookup(c, "lock-timeout", (*cli.Context).Duration),
		NVMLTimeout: lookup(c, "nvml-timeout", (*cli.Context).Duration),
		KernelLog:   lookup(c, "kmsg", (*cli.Context).String),
		UnitRoot:    lookup(c, "unit-root", (*cli.Context).String),
		Stdout:      c.App.Writer,
		Stderr:      c.App.ErrWriter,
		Trace:       session.ContextTrace(c.Context),
	}
	if g.JSON {
		// A tenant's bidi controls would reorder the raw JSON on a screen.
		g.Stdout = safetext.JSONWriter(g.Stdout)
	}
	// An empty path given is a script's unset variable. Reading the live
	// /proc, the real NVML or the default store in its place would answer
	// another question than the one asked.
	for name, v := range map[string]string{"db": g.DB, "proc-root": g.ProcRoot, "sys-root": g.SysRoot, "nvml-fixture": g.NVMLFixture, "kmsg": g.KernelLog, "unit-root": g.UnitRoot} {
		if v == "" && slices.ContainsFunc(c.Lineage(), func(ctx *cli.Context) bool { return ctx.IsSet(name) }) {
			return g, usageError(fmt.Errorf("--%s is empty (or its environment variable is set to nothing)", name))
		}
	}
	switch g.Capture {
	case "auto":
		g.Capture = capture.PathAuto
	case capture.PathBPF, capture.PathProc:
	default:
		return g, usageError(fmt.Errorf("--capture %q: want auto, bpf or proc", g.Capture))
	}
	if g.LockTimeout <= 0 {
		// The store reads a zero timeout as its default, so 0 would wait 10s, not fail at once.
		return g, usageError(fmt.Errorf("--lock-timeout %s: want a positive duration (10s; 1ms not to wait)", g.LockTimeout))
	}
	if g.NVMLTimeout <= 0 {
		return g, usageError(fmt.Errorf("--nvml-timeout %s: want a positive duration (10s)", g.NVMLTimeout))
	}
	limit, err := parseSize(lookup(c, "hash-limit", (*cli.Context).String))
	if err == nil && (limit == 0 || limit > 1<<62) {
		err = errors.New("want a positive size (512MiB)")
	}
	if err != nil {
		return g, usageError(fmt.Errorf("--hash-limit: %w", err))
	}
	g.HashLimit = int64(limit)
	if g.NoNVML && (g.NVMLFixture != "" || g.RequireNVML) {
		return g, usageError(errors.New("--no-nvml cannot be combined with --nvml-fixture or --require-nvml"))
	}
	if g.DB == "" {
		path, err := defaultDB(os.Geteuid())
		if err != nil {
			return g, err
		}
		g.DB = path
	}
	return g, nil
}

// lookup reads a flag from the innermost context where it was set (on the
// command line or through its environment variable), else its default.
func lookup[T any](c *cli.Context, name string, get func(*cli.Context, string) T) T {
	for _, ctx := range c.Lineage() {
		if ctx.IsSet(name) {
			return get(ctx, name)
		}
	}
	return get(c, name)
}

// defaultDB is the default store path (docs/spec.md, Global flags).
func defaultDB(euid int) (string, error) {
	if euid == 0 {
		return "/var/lib/gpusnap/gpusnap.db", nil
	}
	// The XDG spec has a relative path in the variable ignored, since it
	// would put the store wherever the command happened to run.
	state := os.Getenv("XDG_STATE_HOME")
	if !filepath.IsAbs(state) {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("no --db given and no home directory for the default store: %w", err)
		}
		state = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(state, "gpusnap", "gpusnap.db"), nil
}

// captureOptions turns the global flags into what capture.Capture needs.
func (g globals) captureOptions(label, tenant string) capture.Options {
	binaries, processes := session.CachePaths(g.DB)
	return capture.Options{
		ProcRoot:  g.ProcRoot,
		SysRoot:   g.SysRoot,
		KernelLog: g.KernelLog,
		UnitRoot:  g.UnitRoot,
		Path:      g.Capture,
		Label:     label,
		Tenant:    tenant,
		NVML:      g.nvmlOptions(),
		HashLimit: g.HashLimit,
		// The cache lies beside the store, and what one capture hashed, the next reuses.
		BinaryCache: binaries,
		// The cache lies beside the store, and what cannot change without
		// an exec, the next capture takes from the last.
		ProcessCache: processes,
		// The record lies beside the store, in the directory a gpusnap of
		// these credentials owns and has made safe, and one per store.
		RefusalRecord:        g.DB + ".bpf-refusal",
		RuntimeRefusalRecord: runtimeRefusalRecord(),
		Warn:                 func(line string) { fmt.Fprintln(g.Stderr, "gpusnap: "+line) },
	}
}

// runtimeRefusalRecord is where auto remembers a refused BPF capture
// before the store's directory exists. It lies in the runtime directory
// (XDG_RUNTIME_DIR, else root's /run), which a reboot empties, and is ""
// where there is none.
func runtimeRefusalRecord() string {
	dir := os.Getenv("XDG_RUNTIME_DIR")
	if !filepath.IsAbs(dir) && os.Geteuid() == 0 {
		dir = "/run"
	}
	if !filepath.IsAbs(dir) {
		return ""
	}
	return filepath.Join(dir, "gpusnap", "bpf-refusal")
}

// nvmlOptions say where NVML's view comes from, as the global flags say.
func (g globals) nvmlOptions() nvmlread.Options {
	return nvmlread.Options{Disabled: g.NoNVML, FixturePath: g.NVMLFixture, Require: g.RequireNVML, Timeout: g.NVMLTimeout}
}

// captureHost captures the host as the global flags say. A capture that
// could not read some processes' maps or fds says so in one line of counts
// on stderr (the snapshot names them), as what they map or hold is unknown.
func captureHost(ctx context.Context, g globals, label, tenant string) (*snapshot.Snapshot, error) {
	snap, err := capture.Capture(ctx, g.captureOptions(label, tenant))
	if err != nil || !snap.Scan.Partial() {
		return snap, err
	}
	hint := "" // root is refused too, by non-dumpable processes
	if os.Geteuid() != 0 {
		hint = "; run as root to read them"
	}
	fmt.Fprintf(g.Stderr, "gpusnap: partial capture: %d of %d processes could not be read (maps or fds): what they map or hold is unknown%s\n",
		snap.Scan.Unreadable, len(snap.Processes), hint)
	return snap, nil
}

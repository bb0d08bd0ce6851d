// Package session holds a tenant's session on one host, its baseline with
// the GPUs it was given, the post snapshot after it ends, the pair a diff or
// a bundle judges, and the window between them. It is the commands' only
// way to the store, which it opens at Host.DB. The capture comes in through
// Host, so the package links no capture.
package session

import (
	"context"
	"strings"
	"time"

	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/internal/safetext"
	"github.com/gpusnap/gpusnap/snapshot"
	"github.com/gpusnap/gpusnap/store"
)

// Host is where tenant sessions run. It says how to capture the host, where
// its store is and how to open it, and where warnings go. Every func field
// is required. A Host serves one command and holds the store for it (Hold).
type Host struct {
	// DB is the store's path. A tenant diff with no store there stops
	// before capturing, and the event log lies beside it.
	DB string
	// KernelLog is the kernel log a diff reads for its window ("" lets
	// kmsg pick, as the capture did).
	KernelLog string
	// Capture reads the host now into a snapshot labelled label for tenant.
	Capture func(ctx context.Context, label, tenant string) (*snapshot.Snapshot, error)
	// DriverSign names what shows an NVIDIA driver loaded on the host whose
	// /proc is procRoot, "" when nothing does. A baseline that could not
	// read NVML there says so.
	DriverSign func(procRoot string) string
	// LockTimeout is how long an open of the store waits for another
	// gpusnap holding it (DefaultLockTimeout when not positive).
	LockTimeout time.Duration
	// Warn prints one line on stderr for trouble that does not end the
	// command. The line is already safe to print.
	Warn func(line string)
	// Version is the gpusnap that writes bundles, as they record it.
	Version string
	// Retain is how long watch keeps the event log's segments. A segment
	// gone that started longer ago than this was pruned, not removed.
	Retain time.Duration
	// Trace, when not nil, is told of each open of the store.
	Trace *Trace

	// The hold of the store (Hold) is whether one runs, whether it writes,
	// and the store it opened, nil until the first need.
	holding, holdWrite, heldWrite bool
	held                          *store.Store
	// settled is the snapshot the event log was last waited for, and
	// settledProblem what the wait found.
	settled        *snapshot.Snapshot
	settledProblem *eventlog.Problem
}

// warnErr warns with err's text made one safe line.
func (h *Host) warnErr(err error) {
	h.Warn(safetext.Line(strings.ReplaceAll(err.Error(), "\n", " ")))
}

// Pair is what a diff or a bundle judges, From (a baseline, or any stored
// snapshot) against To.
type Pair struct {
	From, To *snapshot.Snapshot
	// StoreErr says the post snapshot captured for the pair could not be
	// stored (a full or read-only disk). The pair is still judged, and the
	// failure is said after the verdict, never in its place.
	StoreErr error
}

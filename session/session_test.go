package session

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/capture"
	"github.com/gpusnap/gpusnap/internal/scenariodir"
	"github.com/gpusnap/gpusnap/nvmlread"
	"github.com/gpusnap/gpusnap/snapshot"
	"github.com/gpusnap/gpusnap/store"
)

// fixture is a Host on a store in a temporary directory that captures one
// end of a scenario (fixtures/scenarios) with the real capture, and keeps
// what it was told.
type fixture struct {
	host     *Host
	side     string // the end the next capture reads: before, during or after
	captures int
	warnings []string
}

func newFixture(t *testing.T, db, scenario string) *fixture {
	t.Helper()
	f := &fixture{side: "before"}
	published := scenariodir.ForTest(t, filepath.Join("..", "fixtures", "scenarios", scenario))
	f.host = &Host{
		DB: db,
		Capture: func(ctx context.Context, label, tenant string) (*snapshot.Snapshot, error) {
			f.captures++
			dir := filepath.Join(published, f.side)
			return capture.Capture(ctx, capture.Options{ProcRoot: filepath.Join(dir, "proc"), Path: capture.PathProc,
				NVML: nvmlread.Options{FixturePath: filepath.Join(dir, "nvml.json")}, Label: label, Tenant: tenant})
		},
		DriverSign:  capture.NVIDIADriverSign,
		LockTimeout: time.Second,
		Warn:        func(line string) { f.warnings = append(f.warnings, line) },
	}
	return f
}

// read runs read on the fixture's store, opened read-only.
func (f *fixture) read(t *testing.T, read func(*store.Store) error) {
	t.Helper()
	st, err := store.Open(f.host.DB, store.Options{ReadOnly: true, LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := read(st); err != nil {
		t.Fatal(err)
	}
}

// count is how many snapshots of tenant with label the store holds.
func (f *fixture) count(t *testing.T, tenant, label string) int {
	t.Helper()
	var n int
	f.read(t, func(st *store.Store) error {
		metas, err := st.List(store.Filter{Tenant: tenant, Label: label})
		n = len(metas)
		return err
	})
	return n
}

// baseline stores tenant's baseline of the scenario's before end.
func (f *fixture) baseline(t *testing.T, tenant string) *snapshot.Snapshot {
	t.Helper()
	f.side = "before"
	snap, _, err := f.host.Baseline(context.Background(), tenant, Allocation{})
	if err != nil {
		t.Fatalf("baseline of %s: %v", tenant, err)
	}
	return snap
}

// post stores tenant's post snapshot of the scenario's after end.
func (f *fixture) post(t *testing.T, tenant string) Pair {
	t.Helper()
	f.side = "after"
	p, err := f.host.Post(context.Background(), tenant)
	if err != nil || p.StoreErr != nil {
		t.Fatalf("post of %s: %v, %v", tenant, err, p.StoreErr)
	}
	return p
}

func (f *fixture) noWarnings(t *testing.T) {
	t.Helper()
	if len(f.warnings) > 0 {
		t.Errorf("warnings: %q", f.warnings)
	}
}

func wantIn(t *testing.T, what string, err error, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %v, want it to say %q", what, err, p)
		}
	}
}

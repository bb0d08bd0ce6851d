package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/store"
)

// testGlobals are the global flags of a test run: a store in a temporary
// directory and a scenario side's proc root and NVML fixture.
func testGlobals(t *testing.T, db, scenario, side string) (globals, *bytes.Buffer, *bytes.Buffer) {
	var stdout, stderr bytes.Buffer
	return globals{
		DB: db, ProcRoot: filepath.Join(scenarioDir(scenario), side, "proc"),
		NVMLFixture: filepath.Join(scenarioDir(scenario), side, "nvml.json"),
		LockTimeout: time.Second, Stdout: &stdout, Stderr: &stderr,
	}, &stdout, &stderr
}

// TestRunFunctions calls each command's run function as restic's tests call
// runForget: options struct in, no *cli.Context, no argument parsing.
func TestRunFunctions(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db := filepath.Join(dir, "gpusnap.db")
	const scenario, tenant = "leftover-ghost-in-container", "job-7"

	g, out, _ := testGlobals(t, db, scenario, "before")
	if err := runBaseline(ctx, g, baselineOptions{Tenant: tenant}); err != nil {
		t.Fatalf("runBaseline: %v", err)
	}
	baseline := strings.TrimSpace(out.String())

	g, out, _ = testGlobals(t, db, scenario, "during")
	if err := runSnapshot(ctx, g, snapshotOptions{Tenant: tenant, Label: "snapshot"}); err != nil {
		t.Fatalf("runSnapshot: %v", err)
	}
	during := strings.TrimSpace(out.String())

	g, out, _ = testGlobals(t, db, scenario, "after")
	g.JSON = true
	err := runDiff(ctx, g, diffOptions{Tenant: tenant, FailOn: diff.AtLeast(diff.Medium), Compare: diff.Options{ZombieThreshold: diff.DefaultZombieThreshold}})
	if st := (statusError{}); !errors.As(err, &st) || st.code != exitFindings {
		t.Fatalf("runDiff of a ghost: %v, want exit status 1", err)
	}
	var r diff.Result
	if err := json.Unmarshal(out.Bytes(), &r); err != nil || r.Summary.Total == 0 || r.From != baseline {
		t.Fatalf("runDiff --json: %v, %+v", err, r.Summary)
	}
	if !slices.ContainsFunc(r.Findings, func(f diff.Finding) bool { return f.InheritedFrom != "" }) {
		t.Errorf("runDiff read no history: %+v", r.Findings)
	}

	g, out, _ = testGlobals(t, db, scenario, "after")
	g.JSON = true
	if err := runList(ctx, g, listOptions{Filter: store.Filter{Tenant: tenant, Label: "snapshot"}}); err != nil {
		t.Fatalf("runList: %v", err)
	}
	var metas []store.Meta
	if err := json.Unmarshal(out.Bytes(), &metas); err != nil || len(metas) != 1 || metas[0].ID != during {
		t.Errorf("runList: %v, %+v; want %s alone", err, metas, during)
	}

	g, out, _ = testGlobals(t, db, scenario, "after")
	if err := runShow(ctx, g, showOptions{ID: during[:20]}); err != nil || !strings.Contains(out.String(), during) {
		t.Errorf("runShow: %v\n%s", err, out)
	}

	g, _, _ = testGlobals(t, db, scenario, "after")
	bundleFile := filepath.Join(dir, "b.tar.gz")
	if err := runBundle(ctx, g, bundleOptions{Tenant: tenant, Output: bundleFile, Compare: diff.Options{MapsDiff: true}}); err != nil {
		t.Fatalf("runBundle: %v", err)
	}
	g, out, _ = testGlobals(t, db, scenario, "after")
	if err := runVerify(ctx, g, verifyOptions{File: bundleFile}); err != nil || !strings.Contains(out.String(), "intact") {
		t.Errorf("runVerify: %v\n%s", err, out)
	}

	g, out, _ = testGlobals(t, db, scenario, "after")
	if err := runPs(ctx, g, psOptions{}); err != nil || !strings.Contains(out.String(), "4242") {
		t.Errorf("runPs: %v\n%s", err, out)
	}

	g, out, _ = testGlobals(t, db, scenario, "after")
	if err := runRm(ctx, g, rmOptions{IDs: []string{during}}); err != nil || strings.TrimSpace(out.String()) != during {
		t.Errorf("runRm: %v, %q", err, out)
	}
	g, _, _ = testGlobals(t, db, scenario, "after")
	if err := runPrune(ctx, g, pruneOptions{Prune: store.Prune{KeepLast: 1}}); err != nil {
		t.Errorf("runPrune: %v", err)
	}
	g, out, _ = testGlobals(t, db, scenario, "after")
	if err := runStoreCheck(ctx, g, storeCheckOptions{}); err != nil || !strings.Contains(out.String(), "is sound") {
		t.Errorf("runStoreCheck: %v\n%s", err, out)
	}
	g, out, _ = testGlobals(t, db, scenario, "after")
	if err := runKeygen(ctx, g, keygenOptions{Prefix: filepath.Join(dir, "k")}); err != nil || !strings.Contains(out.String(), "public key") {
		t.Errorf("runKeygen: %v\n%s", err, out)
	}
}

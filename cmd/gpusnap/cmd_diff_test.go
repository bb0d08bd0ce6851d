package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/gpusnap/gpusnap/capture"
	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/internal/scenariodir"
	"github.com/gpusnap/gpusnap/internal/schematest"
	"github.com/gpusnap/gpusnap/snapshot"
	"github.com/gpusnap/gpusnap/store"
)

// expectedFinding is one line of a scenario's expected.json.
type expectedFinding struct {
	Kind     string `json:"kind"`
	Severity string `json:"severity"`
	PID      int    `json:"pid"`
}

func (f expectedFinding) String() string {
	b, _ := json.Marshal(f)
	return string(b)
}

// TestDiffScenarios walks fixtures/scenarios through the CLI: baseline of the
// before proc root and NVML fixture, then diff --tenant of the after ones. The
// findings (kind, severity, pid) must be expected.json's, and nothing else;
// the exit status 1 exactly when one is at or above medium.
func TestDiffScenarios(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join(scenarioRoot, "*", "expected.json"))
	if err != nil || len(dirs) < 10 {
		t.Fatalf("scenarios: %v (%d found)", err, len(dirs))
	}
	reached := map[string]bool{} // the triage classes the scenarios declare
	var outputs [][]byte         // each scenario's diff --json, for its schema
	for _, exp := range dirs {
		name := filepath.Base(filepath.Dir(exp))
		t.Run(name, func(t *testing.T) {
			stdout, triage := diffScenario(t, fromScenarioTree(t, name), filepath.Join(scenarioRoot, name))
			outputs = append(outputs, []byte(stdout))
			for _, class := range triage {
				reached[class] = true
			}
		})
	}
	if !testing.Short() {
		schematest.Validate(t, "diff", outputs...)
	}
	// Each triage class docs/triage.md describes is reached by one scenario.
	for _, class := range []string{diff.ClassExpected, diff.ClassTenant, diff.ClassAnotherTenant, diff.ClassLeftoverWorker,
		diff.ClassZombieContext, diff.ClassUnkillable, diff.ClassSuspectedCompromise} {
		if !reached[class] {
			t.Errorf("no scenario's expected.json declares triage class %s", class)
		}
	}
}

// TestDiffScenarioPublishedLayout runs scenarios as a user writes them,
// before/ and after/ in full rather than changes to a base, through the
// same harness and goldens: one with a during/ side, one with a kernel
// log, and one with an environment and sys roots.
func TestDiffScenarioPublishedLayout(t *testing.T) {
	tree := t.TempDir()
	root, cwd := filepath.Join(tree, "fixtures", "scenarios"), filepath.Join(tree, "cmd", "gpusnap")
	for _, d := range []string{root, cwd} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"leftover-ghost-in-container", "xid-79-tenant", "rocm-worker-outside-allocation"} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(root, name)
			if err := scenariodir.Materialize(filepath.Join(scenarioRoot, name), dir); err != nil {
				t.Fatal(err)
			}
			if !scenariodir.Published(dir) || fileExists(filepath.Join(dir, scenariodir.ChangesFile)) {
				t.Fatalf("%s is not in the published layout", dir)
			}
			t.Chdir(cwd)
			diffScenario(t, dir, filepath.Join(scenarioRoot, name))
		})
	}
}

// diffScenario runs the scenario laid out at dir, a path from the test's
// directory, whose expected.json and expected.txt lie in src. It returns
// diff --json's output and the triage classes expected.json declares.
func diffScenario(t *testing.T, src, dir string) (string, map[string]string) {
	t.Helper()
	exp := filepath.Join(src, "expected.json")
	var want struct {
		Findings []expectedFinding
		// Triage is the class every finding of a PID must carry.
		Triage map[string]string
	}
	data, err := os.ReadFile(exp)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatalf("%s: %v", exp, err)
	}
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	tenant := scenarioEnv(t, dir, filepath.Base(src))
	side := func(s string) []string {
		args := []string{"--db", db, "--tenant", tenant,
			"--proc-root", filepath.Join(dir, s, "proc"), "--nvml-fixture", filepath.Join(dir, s, "nvml.json")}
		if kmsg := filepath.Join(dir, s, "kmsg"); fileExists(kmsg) {
			args = append(args, "--kmsg", kmsg)
		}
		if sys := filepath.Join(dir, s, "sys"); fileExists(sys) {
			args = append(args, "--sys-root", sys)
		}
		return args
	}
	if code, _, stderr := gpusnap(t, append([]string{"baseline"}, side("before")...)...); code != 0 {
		t.Fatalf("baseline: exit %d: %s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "during")); err == nil {
		if code, _, stderr := gpusnap(t, append([]string{"snapshot"}, side("during")...)...); code != 0 {
			t.Fatalf("snapshot during: exit %d: %s", code, stderr)
		}
	}
	args := append([]string{"diff", "--json"}, side("after")...)
	if _, err := os.Stat(filepath.Join(dir, "allow")); err == nil {
		args = append(args, "--allow", filepath.Join(dir, "allow"))
	}
	code, stdout, stderr := gpusnap(t, args...)
	var r diff.Result
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("diff --json: exit %d, %v: %s %s", code, err, stdout, stderr)
	}
	var got []expectedFinding
	for _, f := range r.Findings {
		e := expectedFinding{Kind: f.Kind, Severity: f.Severity.String()}
		if f.Severity > diff.HighestRaised {
			t.Errorf("%s is %s, above diff.HighestRaised (%s): --fail-on refuses what a rule raises", f.Kind, f.Severity, diff.HighestRaised)
		}
		if f.Process != nil {
			e.PID = f.Process.PID
		}
		got = append(got, e)
	}
	key := func(a, b expectedFinding) int { return strings.Compare(a.String(), b.String()) }
	slices.SortFunc(got, key)
	slices.SortFunc(want.Findings, key)
	if !slices.Equal(got, want.Findings) {
		t.Errorf("findings:\n  %v\nwant:\n  %v\nreport:\n%s", got, want.Findings, stdout)
	}
	wantCode := 0
	for _, f := range want.Findings {
		if sev, _ := diff.ParseSeverity(f.Severity); sev >= diff.Medium {
			wantCode = 1
		}
	}
	if code != wantCode {
		t.Errorf("exit %d, want %d; stderr: %s", code, wantCode, stderr)
	}
	if r.Tenant != tenant || r.Summary.Total != len(want.Findings) {
		t.Errorf("tenant %q, total %d", r.Tenant, r.Summary.Total)
	}
	checkScenarioTriage(t, r, want.Triage)
	_, text, _ := gpusnap(t, slices.DeleteFunc(args, func(a string) bool { return a == "--json" })...)
	checkGolden(t, filepath.Join(src, "expected.txt"), text)
	return stdout, want.Triage
}

// scenarioEnv sets the environment of a scenario's env file (KEY=VALUE
// lines, a Slurm prolog's), for the test, and returns the tenant: the
// file's SLURM_JOB_ID, as a prolog names it, else the scenario's name.
func scenarioEnv(t *testing.T, dir, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "env"))
	if errors.Is(err, os.ErrNotExist) {
		return name
	}
	if err != nil {
		t.Fatal(err)
	}
	tenant := name
	for line := range strings.Lines(string(data)) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok {
			t.Fatalf("%s/env: %q is not KEY=VALUE", dir, line)
		}
		t.Setenv(k, v)
		if k == "SLURM_JOB_ID" {
			tenant = v
		}
	}
	return tenant
}

// checkScenarioTriage checks that every finding of each PID expected.json's
// triage names carries that class, and that each such PID has a finding.
func checkScenarioTriage(t *testing.T, r diff.Result, want map[string]string) {
	t.Helper()
	seen := map[string]bool{}
	for _, f := range r.Findings {
		pid := "0"
		if f.Process != nil {
			pid = strconv.Itoa(f.Process.PID)
		}
		class, ok := want[pid]
		if !ok {
			continue
		}
		seen[pid] = true
		if f.Triage == nil || f.Triage.Class != class {
			t.Errorf("pid %s: %s has triage %+v, want class %s", pid, f.Kind, f.Triage, class)
		}
	}
	for pid := range want {
		if !seen[pid] {
			t.Errorf("expected.json's triage names pid %s, which has no finding", pid)
		}
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// scenarioRoot holds the repository's scenarios, each in the published
// layout or the compact form (fixtures/scenarios/README.md). The goldens
// print it, in the path of each scenario's files.
var scenarioRoot = filepath.Join("..", "..", "fixtures", "scenarios")

// scenarios lays them out in the published layout, each once, in the
// fixtures/scenarios of a tree of TestMain's. From that tree's
// cmd/gpusnap, scenarioCwd, scenarioRoot names the laid-out scenarios.
var (
	scenarios   *scenariodir.Cache
	scenarioCwd string
)

// scenarioDir is where the scenario name lies in the published layout, an
// absolute path. It panics where the fixture tree is broken, which
// scenariodir's own tests report by name.
func scenarioDir(name string) string {
	dir, err := scenarios.Dir(name)
	if err != nil {
		panic(err)
	}
	return dir
}

// fromScenarioTree lays the scenario name out and moves the test into
// scenarioCwd, from where scenarioRoot names it as the goldens print it.
// It returns the absolute path of the scenario's own directory, which
// holds its goldens.
func fromScenarioTree(t *testing.T, name string) string {
	t.Helper()
	src, err := filepath.Abs(filepath.Join(scenarioRoot, name))
	if err != nil {
		t.Fatal(err)
	}
	scenarioDir(name)
	if err := os.MkdirAll(scenarioCwd, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(scenarioCwd)
	return src
}

// sideArgs are the global flags that read one side of a scenario.
func sideArgs(db, name, side string) []string {
	dir := scenarioDir(name)
	return []string{"--db", db, "--proc-root", filepath.Join(dir, side, "proc"), "--nvml-fixture", filepath.Join(dir, side, "nvml.json")}
}

func TestDiffUsageErrors(t *testing.T) {
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	bad := filepath.Join(t.TempDir(), "allow")
	if err := os.WriteFile(bad, []byte("exe=/usr/bin/x\nfoo=bar\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	after := sideArgs(db, "zombie-memory", "after")
	if code, _, stderr := gpusnap(t, append([]string{"baseline", "--tenant", "t"}, sideArgs(db, "zombie-memory", "before")...)...); code != 0 {
		t.Fatalf("baseline: %d %s", code, stderr)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"diff", "--tenant", "nobody"}, `no baseline for tenant "nobody"`},
		{[]string{"diff"}, "diff needs --tenant T, or FROM [TO]"},
		{[]string{"diff", "a", "b", "c"}, "diff needs --tenant T, or FROM [TO]"},
		{[]string{"diff", "--tenant", "t", "abc"}, "not both"},
		{[]string{"diff", "--tenant", "t", "--fail-on", "severe"}, `--fail-on: "severe" is neither a severity`},
		{[]string{"diff", "--tenant", "t", "--zombie-threshold", "-1"}, `--zombie-threshold: "-1" is not a size`},
		{[]string{"diff", "--tenant", "t", "--allow", bad}, bad + ":2: unknown field \"foo\""},
		{[]string{"diff", "--tenant", "t", "--allow", bad + ".missing"}, "no such file"},
		{[]string{"diff", "nosuchid"}, "no such snapshot"},
	} {
		code, stdout, stderr := gpusnap(t, append(tc.args, after...)...)
		lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
		if code != 2 || len(lines) != 1 || !strings.Contains(stderr, tc.want) || stdout != "" {
			t.Errorf("%v: exit %d, stderr %q, stdout %q; want exit 2 and one line with %q", tc.args, code, stderr, stdout, tc.want)
		}
	}
	// A tenant diff against no store at all creates none.
	missing := filepath.Join(t.TempDir(), "none.db")
	code, _, stderr := gpusnap(t, append([]string{"diff", "--tenant", "t"}, append(after, "--db", missing)...)...)
	if _, err := os.Stat(missing); code != 2 || !strings.Contains(stderr, `no baseline for tenant "t": no store at `+missing) || err == nil {
		t.Errorf("diff --tenant without a store: exit %d, %q, store file: %v", code, stderr, err)
	}
	// Nothing was stored by the failed diffs: the store holds the baseline alone.
	code, stdout, _ := gpusnap(t, "list", "--json", "--db", db)
	var metas []map[string]any
	if err := json.Unmarshal([]byte(stdout), &metas); code != 0 || err != nil || len(metas) != 1 {
		t.Errorf("list after failed diffs: exit %d, %v, %s", code, err, stdout)
	}
}

func TestParseSize(t *testing.T) {
	for text, want := range map[string]uint64{
		"64MiB": 64 << 20, "1GiB": 1 << 30, "1048576": 1 << 20, "0": 0, "512mb": 512e6, "2 GiB": 2 << 30, "10KiB": 10 << 10, "3B": 3, "1G": 1 << 30, "64m": 64 << 20,
	} {
		if got, err := parseSize(text); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", text, got, err, want)
		}
	}
	for _, text := range []string{"", "MiB", "1.5GiB", "-1", "12XB", "99999999999999999999", "20000000TiB"} {
		if _, err := parseSize(text); err == nil {
			t.Errorf("parseSize(%q) took it", text)
		}
	}
	// sizeText writes the defaults the flags show: parseSize reads them back.
	for n, want := range map[uint64]string{diff.DefaultZombieThreshold: "64MiB", 1 << 30: "1GiB", 1536: "1536", 3 << 10: "3KiB", 0: "0"} {
		if got := sizeText(n); got != want {
			t.Errorf("sizeText(%d) = %q, want %q", n, got, want)
		} else if back, err := parseSize(got); err != nil || back != n {
			t.Errorf("parseSize(sizeText(%d)) = %d, %v", n, back, err)
		}
	}
}

// diffJSON runs a diff with --json and decodes its result.
func diffJSON(t *testing.T, wantCode int, args ...string) diff.Result {
	t.Helper()
	code, stdout, stderr := gpusnap(t, append([]string{"diff", "--json"}, args...)...)
	if code != wantCode {
		t.Fatalf("diff %v: exit %d, want %d: %s", args, code, wantCode, stderr)
	}
	var r diff.Result
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	return r
}

func TestDiffThresholdsAndFailOn(t *testing.T) {
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	for _, name := range []string{"zombie-memory", "other-device-mapping"} {
		if code, _, stderr := gpusnap(t, append([]string{"baseline", "--tenant", name}, sideArgs(db, name, "before")...)...); code != 0 {
			t.Fatal(stderr)
		}
	}
	zombie := append([]string{"--tenant", "zombie-memory"}, sideArgs(db, "zombie-memory", "after")...)
	diffJSON(t, 1, zombie...)
	if r := diffJSON(t, 0, append([]string{"--zombie-threshold", "4GiB"}, zombie...)...); len(r.Findings) != 0 {
		t.Errorf("4 GiB of growth at a 4 GiB threshold: %v", r.Findings)
	}
	if r := diffJSON(t, 1, append([]string{"--zombie-threshold", "4095MiB"}, zombie...)...); len(r.Findings) != 1 {
		t.Errorf("4 GiB of growth over a 4095 MiB threshold: %v", r.Findings)
	}
	// No rule raises critical: a threshold above every finding is refused,
	// not a gate turned off.
	args := append([]string{"diff", "--fail-on", "critical"}, zombie...)
	code, stdout, stderr := gpusnap(t, args...)
	oneLine(t, args, code, stdout, stderr, "usage: --fail-on: no finding is ever critical")
	other := append([]string{"--tenant", "other-device-mapping"}, sideArgs(db, "other-device-mapping", "after")...)
	diffJSON(t, 0, other...)
	diffJSON(t, 1, append([]string{"--fail-on", "low"}, other...)...)
	// Each severity as a threshold, against a worst finding of low and of high.
	for _, tc := range []struct {
		failOn              string
		wantLow, wantZombie int
	}{
		{"info", 1, 1}, {"low", 1, 1}, {"medium", 0, 1}, {"high", 0, 1}, {"HIGH", 0, 1},
	} {
		diffJSON(t, tc.wantLow, append([]string{"--fail-on", tc.failOn}, other...)...)
		diffJSON(t, tc.wantZombie, append([]string{"--fail-on", tc.failOn}, zombie...)...)
	}
	// Triage classes: the tenant's own process fails the default gate, and
	// not one that asks only for a compromise or a leftover.
	if code, _, stderr := gpusnap(t, append([]string{"baseline", "--tenant", "triage-tenant"}, sideArgs(db, "triage-tenant", "before")...)...); code != 0 {
		t.Fatal(stderr)
	}
	own := append([]string{"--tenant", "triage-tenant"}, sideArgs(db, "triage-tenant", "after")...)
	diffJSON(t, 1, own...)
	diffJSON(t, 0, append([]string{"--fail-on", "suspected_compromise,leftover_worker"}, own...)...)
	diffJSON(t, 1, append([]string{"--fail-on", "tenant"}, own...)...)
	diffJSON(t, 1, append([]string{"--fail-on", "high,another_tenant"}, own...)...)
	for _, bad := range []string{"", "none", "hi", "high,medium", "leftover"} {
		if code, _, stderr := gpusnap(t, append([]string{"diff", "--fail-on", bad}, zombie...)...); code != 2 || !strings.Contains(stderr, "--fail-on") {
			t.Errorf("--fail-on %q: exit %d, %s", bad, code, stderr)
		}
	}
}

// diff FROM TO between stored snapshots, by prefix, and diff FROM against a
// fresh capture, give what diff --tenant gives; --maps-diff adds the maps.
func TestDiffStoredSnapshots(t *testing.T) {
	const name = "leftover-ghost-in-container"
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	_, base, _ := gpusnap(t, append([]string{"baseline", "--tenant", name}, sideArgs(db, name, "before")...)...)
	_, post, _ := gpusnap(t, append([]string{"snapshot", "--label", "post"}, sideArgs(db, name, "after")...)...)
	base, post = strings.TrimSpace(base), strings.TrimSpace(post)
	byIDs := diffJSON(t, 1, append([]string{"--maps-diff", base, post[:len(post)-3]}, "--db", db)...)
	if byIDs.From != base || byIDs.To != post || len(byIDs.Findings) != 6 {
		t.Errorf("diff FROM TO: from %s to %s, %d findings", byIDs.From, byIDs.To, len(byIDs.Findings))
	}
	d := byIDs.MapsDiffs["4242@61000"]
	if len(byIDs.MapsDiffs) != 1 || !strings.Contains(d, "+7f3a40000000-7f3a40200000 rw-s 00000000 00:05 1027") || !strings.HasPrefix(d, "--- "+base) {
		t.Errorf("maps diffs = %q", byIDs.MapsDiffs)
	}
	fresh := diffJSON(t, 1, append([]string{base}, sideArgs(db, name, "after")...)...)
	if fresh.From != base || fresh.To == post || len(fresh.Findings) != 6 || fresh.Tenant != name {
		t.Errorf("diff FROM: from %s to %s tenant %q, %d findings", fresh.From, fresh.To, fresh.Tenant, len(fresh.Findings))
	}
	// The fresh capture was not stored.
	_, list, _ := gpusnap(t, "list", "--json", "--db", db)
	if n := strings.Count(list, `"id"`); n != 2 {
		t.Errorf("%d snapshots stored, want 2:\n%s", n, list)
	}
}

// The text report of a scenario with --verbose: the summary line, then the
// findings by severity, each in full (the scenarios' expected.txt hold the
// default report, its blocks).
func TestDiffTextReportVerbose(t *testing.T) {
	const name = "unexpected-masquerade"
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	gpusnap(t, append([]string{"baseline", "--tenant", name}, sideArgs(db, name, "before")...)...)
	code, stdout, stderr := gpusnap(t, append([]string{"diff", "--verbose", "--tenant", name}, sideArgs(db, name, "after")...)...)
	if code != 1 || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	lines := strings.Split(stdout, "\n")
	if !strings.HasPrefix(lines[0], "gpusnap diff: 3 high, 0 medium, 0 low, 0 info; tenant unexpected-masquerade; from ") {
		t.Errorf("summary line %q", lines[0])
	}
	for _, want := range []string{"\nHIGH\n", "masquerade: exe /dev/shm/.x/xmrig lies under /dev/shm",
		"masquerade: exe /dev/shm/.x/xmrig lies under hidden directory /dev/shm/.x", `masquerade: comm "python3" disagrees with exe /dev/shm/.x/xmrig`,
		"utilization on GPU GPU-3f2a6b1c-0d4e-4f5a-8b9c-1d2e3f4a5b6c: sm 100%, memory 87%"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("report lacks %q:\n%s", want, stdout)
		}
	}
}

// A ghost's findings name the tenant process it inherited the device from,
// found in the tenant's snapshot taken while both ran.
func TestDiffInheritedFromTenant(t *testing.T) {
	const name = "leftover-ghost-in-container"
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	for _, step := range [][]string{
		append([]string{"baseline", "--tenant", name}, sideArgs(db, name, "before")...),
		append([]string{"snapshot", "--tenant", name}, sideArgs(db, name, "during")...),
	} {
		if code, _, stderr := gpusnap(t, step...); code != 0 {
			t.Fatalf("%v: %s", step, stderr)
		}
	}
	r := diffJSON(t, 1, append([]string{"--tenant", name}, sideArgs(db, name, "after")...)...)
	inherited := map[string]string{}
	for _, f := range r.Findings {
		inherited[f.Kind+" "+f.Device] = f.InheritedFrom
	}
	const parent = "4241@60900 (/usr/bin/python3.11)"
	for key, want := range map[string]string{
		"leftover_device_mapping /dev/nvidia0":   parent,
		"leftover_device_mapping /dev/nvidiactl": parent,
		"leftover_device_holder /dev/nvidia0":    parent,
		"leftover_device_holder /dev/nvidia-uvm": "", // no mapping of it to match
		"unexpected_gpu_process ":                "",
	} {
		if got, ok := inherited[key]; !ok || got != want {
			t.Errorf("%s: inherited from %q (found %v), want %q", key, got, ok, want)
		}
	}
}

// A renamed node shows only in its device number, which capture reads on the
// kernel's own procfs alone: the post snapshot is a capture of a scenario
// with the number a live capture on a GPU host records, stored, then diffed
// through the CLI by id.
func TestDiffRenamedDeviceNode(t *testing.T) {
	const name = "leftover-read-only"
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	_, base, stderr := gpusnap(t, append([]string{"baseline", "--tenant", name}, sideArgs(db, name, "before")...)...)
	if base == "" {
		t.Fatal(stderr)
	}
	post, err := capture.Capture(context.Background(), capture.Options{ProcRoot: filepath.Join(scenarioDir(name), "after", "proc"),
		Label: snapshot.LabelPost, Tenant: name})
	if err != nil {
		t.Fatal(err)
	}
	renamed := 0
	for i := range post.Processes {
		p := &post.Processes[i]
		for j := range p.Mappings {
			if m := &p.Mappings[j]; p.PID == 4242 && m.Path == "/dev/nvidia0" {
				m.Path, m.DeviceNumber, m.DeviceType = "/var/lib/docker/overlay2/l/gpu", snapshot.DeviceNumber{Major: 195}, "char"
				renamed++
			}
		}
	}
	if renamed != 1 {
		t.Fatalf("the scenario's pid 4242 has %d mappings of /dev/nvidia0, want 1", renamed)
	}
	st, err := store.Open(db, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Put(post); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	r := diffJSON(t, 1, "--db", db, strings.TrimSpace(base), post.ID)
	var got []string
	for _, f := range r.Findings {
		got = append(got, f.Kind+" "+f.Severity.String()+" "+f.Device)
	}
	want := []string{
		"renamed_device_node high /var/lib/docker/overlay2/l/gpu",
		"leftover_device_holder medium /dev/nvidia0",
		"leftover_device_mapping medium /var/lib/docker/overlay2/l/gpu",
		"unexpected_gpu_process medium ",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("findings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A process whose comm, exe, command line and descriptors carry newlines,
// escape sequences and bytes that are not UTF-8, captured from a proc root
// and diffed through the CLI: the text report escapes every one, so no line
// is forged and nothing reaches the terminal raw.
func TestDiffTextHostileProcess(t *testing.T) {
	const name = "unexpected-masquerade"
	tmp := t.TempDir()
	root := filepath.Join(tmp, "proc")
	if out, err := exec.Command("cp", "-a", filepath.Join(scenarioDir(name), "after", "proc"), root).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	pdir := filepath.Join(root, "6660")
	comm := "py\x1b[2J\nHIGH\xff"
	for file, text := range map[string]string{
		"comm":    comm + "\n",
		"stat":    "6660 (" + comm + ") S 1 6660 6660 0 -1 4194560 1200 0 0 0 12 3 0 0 20 0 1 0 90000 123456789 2048 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
		"cmdline": "x\x1b]0;pwned\x07\x00--opt=\xc2\x9b31m\x00\n  leftover_device_mapping: forged\x00",
	} {
		if err := os.WriteFile(filepath.Join(pdir, file), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{
		"exe":  "/dev/shm/.x/\x1b[31mxmrig\nHIGH",
		"fd/5": "/dev/nvidia1\n  unexpected_gpu_process: forged\x1b[0m",
	} {
		if err := os.Remove(filepath.Join(pdir, link)); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(pdir, link)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(pdir, "fdinfo", "5"), []byte("pos:\t0\nflags:\t0100002\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(tmp, "gpusnap.db")
	if code, _, stderr := gpusnap(t, append([]string{"baseline", "--tenant", name}, sideArgs(db, name, "before")...)...); code != 0 {
		t.Fatal(stderr)
	}
	args := []string{"diff", "--tenant", name, "--maps-diff", "--db", db, "--proc-root", root,
		"--nvml-fixture", filepath.Join(scenarioDir(name), "after", "nvml.json")}
	checkHostileReport(t, false, args...)
	checkHostileReport(t, true, append(args, "--verbose")...)
}

// checkHostileReport runs diff with args and checks that every line of its
// text report is one the report wrote (verbose: the findings in full).
func checkHostileReport(t *testing.T, verbose bool, args ...string) {
	t.Helper()
	code, stdout, stderr := gpusnap(t, args...)
	if code != 1 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !utf8.ValidString(stdout) {
		t.Errorf("report is not UTF-8:\n%q", stdout)
	}
	titles, prev, headers := 0, "", map[string]int{}
	for i, line := range strings.Split(strings.TrimSuffix(stdout, "\n"), "\n") {
		if strings.ContainsFunc(line, func(r rune) bool { return unicode.IsControl(r) }) {
			t.Errorf("line %d holds a control character: %q", i, line)
		}
		// A forged line is one the hostile text made: it starts, after a
		// maps diff's marker and the report's indent, with the text planted
		// after a newline. Checked first: the report's own indented lines
		// below would let it through.
		if text := strings.TrimLeft(line, "+- "); strings.HasPrefix(text, "leftover_device_mapping: forged") ||
			strings.HasPrefix(text, "unexpected_gpu_process: forged") {
			t.Errorf("line %d is forged: %q", i, line)
			continue
		}
		switch {
		case verbose && (line == "HIGH" || line == "MEDIUM"):
			if headers[line]++; headers[line] > 1 {
				t.Errorf("line %d: a second %s header (a forged one): %q", i, line, line)
			}
		case !verbose && prev == "" && strings.HasPrefix(line, "pid "):
			// A block's title: the one process has one block.
			if titles++; titles > 1 {
				t.Errorf("line %d: a second block title (a forged one): %q", i, line)
			}
		case i == 0 && strings.HasPrefix(line, "gpusnap diff: "), i == 1 && strings.HasPrefix(line, "lead: "), line == "",
			strings.HasPrefix(line, "note: "), strings.HasPrefix(line, "maps diff of "),
			strings.HasPrefix(line, "---") || strings.HasPrefix(line, "+++") || strings.HasPrefix(line, "@@") ||
				strings.HasPrefix(line, "+") || strings.HasPrefix(line, "-") || strings.HasPrefix(line, " "):
		default:
			t.Errorf("line %d is not the report's: %q", i, line)
		}
		prev = line
	}
	// Capture writes the invalid byte as U+FFFD; the report keeps it printable.
	wants := []string{`py\x1b[2J\nHIGH` + "\ufffd", `/dev/shm/.x/\x1b[31mxmrig\nHIGH`, `/dev/nvidia1\n  unexpected_gpu_process: forged\x1b[0m`}
	if verbose {
		wants = append(wants, `x\x1b]0;pwned\x07 --opt=\u009b31m \n  leftover_device_mapping: forged`)
	}
	for _, want := range wants {
		if !strings.Contains(stdout, want) {
			t.Errorf("report lacks %s:\n%s", want, stdout)
		}
	}
}

// An unchanged process whose device path holds invalid UTF-8 raises nothing:
// the baseline read back from the store and the fresh capture must agree.
func TestDiffUnchangedHostileDevicePathIsClean(t *testing.T) {
	root := t.TempDir()
	pid := filepath.Join(root, "400")
	for _, f := range []struct{ name, data string }{
		{"stat", "400 (x\xff) S 1 400 400 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 900 0 0\n"},
		{"maps", "7f0000000000-7f0000200000 rw-s 00000000 00:06 77 /tmp/w/dev/nvidia\xff9\n"},
	} {
		if err := os.MkdirAll(filepath.Join(pid, "fd"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pid, f.name), []byte(f.data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/tmp/w/dev/nvidia\xff9", filepath.Join(pid, "fd", "5")); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(t.TempDir(), "s.db")
	common := []string{"--db", db, "--proc-root", root, "--no-nvml"}
	if code, _, stderr := gpusnap(t, append([]string{"baseline", "--tenant", "t"}, common...)...); code != 0 {
		t.Fatalf("baseline: exit %d: %s", code, stderr)
	}
	if code, stdout, stderr := gpusnap(t, append([]string{"diff", "--tenant", "t"}, common...)...); code != 0 {
		t.Fatalf("diff of an unchanged host: exit %d\n%s%s", code, stdout, stderr)
	}
}

// TestBaselineAllocation: job 4242 was given GPU 1 (SLURM_JOB_GPUS in the
// prolog's environment); its ghost at the end uses GPU 0.
func TestBaselineAllocation(t *testing.T) {
	db := filepath.Join(t.TempDir(), "s.db")
	t.Setenv("SLURM_JOB_ID", "4242")
	t.Setenv("SLURM_JOB_GPUS", "1")
	before := scenarioEnd("cuda-ghost-keeps-context", "before")
	if code, _, stderr := gpusnap(t, append([]string{"baseline", "--tenant", "4242", "--db", db}, before...)...); code != 0 {
		t.Fatalf("baseline: exit %d: %s", code, stderr)
	}
	after := scenarioEnd("cuda-ghost-keeps-context", "after")
	code, stdout, stderr := gpusnap(t, append([]string{"diff", "--json", "--tenant", "4242", "--db", db}, after...)...)
	if code != exitFindings {
		t.Fatalf("diff: exit %d: %s", code, stderr)
	}
	var r diff.Result
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range r.Findings {
		if f.Kind == diff.KindOutOfAllocation {
			got = append(got, f.Device)
			if f.Process.PID != 670 || f.Severity != diff.High || !strings.Contains(strings.Join(f.Evidence, "\n"), "allocation of 4242: 1") {
				t.Errorf("finding: %+v", f)
			}
		}
	}
	if strings.Join(got, ",") != "/dev/nvidia0" {
		t.Errorf("out_of_allocation_gpu_use on %q, want /dev/nvidia0", got)
	}

	// --gpus wins over the environment, and bad input is one line and exit 2.
	// It is the gate too: a process of the fixture holds GPU 0, so the
	// baseline is not clean (exit 1), its report first, and stored all the
	// same, its id the last line.
	code, stdout, stderr = gpusnap(t, append([]string{"baseline", "--tenant", "4242", "--gpus", "0", "--db", db}, before...)...)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if code != exitFindings || !strings.HasPrefix(stdout, "gpusnap check: not clean: ") || !strings.Contains(stdout, "gpu_in_use") {
		t.Fatalf("baseline --gpus 0 of a GPU in use: exit %d, want 1 with check's report: %s %s", code, stdout, stderr)
	}
	if code, out, _ := gpusnap(t, "show", "--db", db, lines[len(lines)-1]); code != 0 || !strings.Contains(out, "baseline") {
		t.Errorf("the last line %q is not the stored baseline's id: exit %d %s", lines[len(lines)-1], code, out)
	}
	if code, stdout, _ := gpusnap(t, append([]string{"diff", "--json", "--tenant", "4242", "--db", db}, after...)...); strings.Contains(stdout, diff.KindOutOfAllocation) {
		t.Errorf("GPU 0 allocated, yet: exit %d %s", code, stdout)
	}
	t.Setenv("SLURM_JOB_GPUS", "zero")
	if code, _, stderr := gpusnap(t, append([]string{"baseline", "--tenant", "4242", "--db", db}, before...)...); code != exitError ||
		!strings.Contains(stderr, "SLURM_JOB_GPUS") {
		t.Errorf("bad SLURM_JOB_GPUS: exit %d: %s", code, stderr)
	}
}

// TestNVIDIAOnlyHostUnchanged runs every scenario of NVIDIA's alone with a
// sys root whose only DRM device is NVIDIA's (nvidia-drm, left to NVML):
// the text report is its golden byte for byte, and the snapshot records no
// accelerators, so such a host reads as it did before other vendors were.
func TestNVIDIAOnlyHostUnchanged(t *testing.T) {
	sys := t.TempDir()
	dev := "devices/pci0000:00/0000:00:01.0/0000:18:00.0"
	for name, target := range map[string]string{
		"class/drm/card0": "../../" + dev + "/drm/card0", "class/drm/renderD128": "../../" + dev + "/drm/renderD128",
		dev + "/drm/card0/device": "../../../0000:18:00.0", dev + "/drm/renderD128/device": "../../../0000:18:00.0",
		dev + "/subsystem": "../../../../bus/pci", dev + "/driver": "../../../../bus/pci/drivers/nvidia",
	} {
		if err := os.MkdirAll(filepath.Join(sys, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(sys, name)); err != nil {
			t.Fatal(err)
		}
	}
	mustWrite(t, filepath.Join(sys, dev, "vendor"), "0x10de\n")
	mustWrite(t, filepath.Join(sys, dev, "drm/card0/dev"), "226:0\n")
	mustWrite(t, filepath.Join(sys, dev, "drm/renderD128/dev"), "226:128\n")
	dirs, _ := filepath.Glob(filepath.Join(scenarioRoot, "*", "expected.txt"))
	ran := 0
	for _, golden := range dirs {
		name := filepath.Base(filepath.Dir(golden))
		if laid := scenarioDir(name); fileExists(filepath.Join(laid, "before", "sys")) || fileExists(filepath.Join(laid, "env")) {
			continue // another vendor's host, or an allocation from the environment
		}
		ran++
		t.Run(name, func(t *testing.T) {
			golden := filepath.Join(fromScenarioTree(t, name), "expected.txt")
			dir := filepath.Join(scenarioRoot, name)
			db := filepath.Join(t.TempDir(), "gpusnap.db")
			side := func(s string) []string {
				args := []string{"--db", db, "--tenant", name, "--sys-root", sys,
					"--proc-root", filepath.Join(dir, s, "proc"), "--nvml-fixture", filepath.Join(dir, s, "nvml.json")}
				if kmsg := filepath.Join(dir, s, "kmsg"); fileExists(kmsg) {
					args = append(args, "--kmsg", kmsg)
				}
				return args
			}
			code, stdout, stderr := gpusnap(t, append([]string{"baseline", "--json"}, side("before")...)...)
			if code != 0 || strings.Contains(stdout, `"accelerators"`) {
				t.Fatalf("baseline: exit %d, accelerators recorded: %v: %s", code, strings.Contains(stdout, `"accelerators"`), stderr)
			}
			if fileExists(filepath.Join(dir, "during")) {
				if code, _, stderr := gpusnap(t, append([]string{"snapshot"}, side("during")...)...); code != 0 {
					t.Fatalf("snapshot during: exit %d: %s", code, stderr)
				}
			}
			args := append([]string{"diff"}, side("after")...)
			if fileExists(filepath.Join(dir, "allow")) {
				args = append(args, "--allow", filepath.Join(dir, "allow"))
			}
			_, text, _ := gpusnap(t, args...)
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if got := normalize(text); got != string(want) {
				t.Errorf("with an NVIDIA-only sys root the report differs from %s:\n--- got\n%s\n--- want\n%s", golden, got, want)
			}
		})
	}
	if ran < 20 {
		t.Errorf("%d NVIDIA scenarios ran: fewer than expected", ran)
	}
}

// mustWrite writes a file, its directories first.
func mustWrite(t *testing.T, name, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

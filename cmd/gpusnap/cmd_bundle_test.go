package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/bundle"
	"github.com/gpusnap/gpusnap/capture"
	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/snapshot"
	"github.com/gpusnap/gpusnap/store"
)

// bundleGhost is a tenant's forked child still mapping /dev/nvidia0 read-write.
var bundleGhost = snapshot.Process{
	PID: 4243, StartTime: 987654, PPID: 1, Comm: "python3", Exe: "/usr/bin/python3", UID: 1001,
	Mappings: []snapshot.Mapping{{Address: "7f0000000000-7f0000200000", Start: 0x7f0000000000, End: 0x7f0000200000, Size: 0x200000,
		Perms: "rw-s", Dev: "00:06", Inode: 811, Path: "/dev/nvidia0", Class: snapshot.ClassNVIDIA}},
	Raw: &snapshot.Raw{Maps: "7f0000000000-7f0000200000 rw-s 00000000 00:06 811 /dev/nvidia0\n", Status: "Name:\tpython3\n", Cmdline: "python3\x00", Cgroup: "0::/\n"},
}

// storeWith puts hand-built snapshots of tenant job-7 into a new store:
// a baseline and, when post is set, a post snapshot after it.
func storeWith(t *testing.T, post bool) (db string, snaps []*snapshot.Snapshot) {
	t.Helper()
	db = filepath.Join(t.TempDir(), "gpusnap.db")
	st, err := store.Open(db, store.Options{LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	mk := func(id, label string, when time.Time, procs ...snapshot.Process) *snapshot.Snapshot {
		s := &snapshot.Snapshot{ID: id, Label: label, Tenant: "job-7", Processes: procs,
			Host: snapshot.Host{Hostname: "n1", BootID: "b1", CaptureStart: when, CaptureEnd: when.Add(time.Second)}}
		if err := st.Put(s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	snaps = append(snaps, mk("20261129-090000.000000-000001", snapshot.LabelPost, at.Add(-time.Hour))) // an earlier job's post
	snaps = append(snaps, mk("20261129-100000.000000-000002", snapshot.LabelBaseline, at))
	if post {
		snaps = append(snaps, mk("20261129-120000.000000-000003", snapshot.LabelPost, at.Add(2*time.Hour), bundleGhost))
	}
	return db, snaps
}

func verifiedManifest(t *testing.T, file string) *bundle.Predicate {
	t.Helper()
	return verifiedBundle(t, file).Predicate
}

// verifiedBundle verifies file, which must be intact.
func verifiedBundle(t *testing.T, file string) *bundle.Verification {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := bundle.Verify(f, nil)
	if err != nil || !rep.Intact() {
		t.Fatalf("bundle %s: %v %+v", file, err, rep)
	}
	return rep
}

func TestBundleFromTo(t *testing.T) {
	db, snaps := storeWith(t, true)
	dir := t.TempDir()
	a := filepath.Join(dir, "a.tar.gz")
	code, out, errOut := gpusnap(t, "bundle", "20261129-10", "20261129-12", "-o", a, "--db", db)
	if code != 0 || !strings.HasPrefix(out, "wrote "+a+": "+snaps[1].ID+" to "+snaps[2].ID+", findings: ") || !strings.Contains(out, ", unsigned, sha256 ") {
		t.Fatalf("bundle: %d %q %q", code, out, errOut)
	}
	m := verifiedManifest(t, a)
	if m.Before.ID != snaps[1].ID || m.After.ID != snaps[2].ID || m.Tenant != "job-7" || m.UID != os.Getuid() || m.Summary.Worst != "high" {
		t.Errorf("manifest: %+v", m)
	}
	if m.GpusnapVersion == "" || m.GpusnapVersion != capture.Version {
		t.Errorf("manifest names gpusnap version %q, want this build's %q", m.GpusnapVersion, capture.Version)
	}
	// The ghost's finding, its maps diff and the kernel's text are all in.
	// Both snapshots are proved in the store's log at the checkpoint it carries.
	if rep := verifiedBundle(t, a); !rep.StoreProved || len(rep.Predicate.Store.Inclusion) != 2 {
		t.Errorf("store evidence: %+v", rep.Predicate.Store)
	}
	if code, out, _ := gpusnap(t, "verify", a); code != 0 || !strings.Contains(out, "store log: 2 stored snapshots proved") {
		t.Errorf("verify: %d %s", code, out)
	}
	files := map[string]bool{}
	for _, e := range verifiedBundle(t, a).Entries {
		files[e.Name] = true
	}
	for _, want := range []string{"data/maps/4243@987654.diff", "data/raw/4243@987654/maps", "data/raw/4243@987654/cmdline", "data/report.html"} {
		if !files[want] {
			t.Errorf("bundle lacks %s: %v", want, files)
		}
	}
	if fi, _ := os.Stat(a); fi.Mode().Perm() != 0o600 {
		t.Errorf("bundle mode %v", fi.Mode())
	}
	// The same two snapshots give the same bytes (in a file of the same
	// name: the bag's directory is named after it).
	b := filepath.Join(t.TempDir(), "a.tar.gz")
	if code, _, errOut := gpusnap(t, "--db", db, "bundle", snaps[1].ID, snaps[2].ID, "-o", b); code != 0 {
		t.Fatal(errOut)
	}
	ab, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	if !bytes.Equal(ab, bb) {
		t.Error("two bundles of the same snapshots differ")
	}

	if code, _, errOut := gpusnap(t, "bundle", snaps[1].ID, snaps[2].ID, "-o", a, "--db", db); code != 2 || !strings.Contains(errOut, "exists (use --force") {
		t.Errorf("over an existing file: %d %q", code, errOut)
	}
	code, out, _ = gpusnap(t, "bundle", snaps[1].ID, snaps[2].ID, "-o", a, "--db", db, "--force", "--json")
	var res struct {
		File, SHA256 string
		Files        int
	}
	if err := json.Unmarshal([]byte(out), &res); code != 0 || err != nil || res.File != a || len(res.SHA256) != 64 || res.Files < 5 {
		t.Errorf("--force --json: %d %v %q", code, err, out)
	}
}

func TestBundleTenant(t *testing.T) {
	db, snaps := storeWith(t, true)
	dir := t.TempDir()
	keyPrefix := filepath.Join(dir, "k")
	if code, _, errOut := gpusnap(t, "keygen", "-o", keyPrefix); code != 0 {
		t.Fatal(errOut)
	}
	out := filepath.Join(dir, "t.tar.gz")
	code, stdout, errOut := gpusnap(t, "bundle", "--tenant", "job-7", "-o", out, "--db", db, "--sign-key", keyPrefix+".key",
		"--tenant-start", "2026-11-29T10:05:00Z", "--tenant-end", "2026-11-29T11:55:00+01:00")
	if code != 0 || !strings.Contains(stdout, "signed by ") {
		t.Fatalf("bundle --tenant: %d %q %q", code, stdout, errOut)
	}
	m := verifiedManifest(t, out)
	if m.Before.ID != snaps[1].ID || m.After.ID != snaps[2].ID || m.Signer == nil || m.TenantEnd == nil || m.TenantEnd.Hour() != 10 {
		t.Errorf("manifest: %+v", m)
	}
	if code, _, _ := gpusnap(t, "verify", out, "--pub", keyPrefix+".pub"); code != 0 {
		t.Error("verify --pub of a signed bundle failed")
	}
}

// With no post snapshot after the baseline, bundle --tenant captures one and stores it.
func TestBundleTenantCapturesPost(t *testing.T) {
	db, snaps := storeWith(t, false)
	out := filepath.Join(t.TempDir(), "t.tar.gz")
	code, _, errOut := gpusnap(t, "bundle", "--tenant", "job-7", "-o", out, "--db", db, "--no-nvml", "--proc-root", quietHost(t))
	if code != 0 {
		t.Fatalf("bundle --tenant: %d %q", code, errOut)
	}
	m := verifiedManifest(t, out)
	if m.Before.ID != snaps[1].ID || m.After.ID == snaps[0].ID || m.After.Label != snapshot.LabelPost {
		t.Errorf("manifest: %+v", m)
	}
	st, err := store.Open(db, store.Options{ReadOnly: true, LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Get(m.After.ID); err != nil {
		t.Errorf("the fresh post snapshot was not stored: %v", err)
	}
}

func TestBundleErrors(t *testing.T) {
	db, snaps := storeWith(t, true)
	dir := t.TempDir()
	out := filepath.Join(dir, "x.tar.gz")
	junk := filepath.Join(dir, "junk.key")
	os.WriteFile(junk, []byte("junk"), 0o600)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"bundle", "--tenant", "job-7"}, "needs -o FILE"},
		{[]string{"bundle", "--tenant", "job-7", snaps[1].ID, "-o", out}, "not both"},
		{[]string{"bundle", snaps[1].ID, "-o", out}, "two snapshot ids"},
		{[]string{"bundle", snaps[1].ID, "nosuch", "-o", out}, "nosuch"},
		{[]string{"bundle", "--tenant", "job-8", "-o", out}, `no baseline for tenant "job-8"`},
		{[]string{"bundle", "--tenant", "job-7", "-o", out, "--sign-key", junk}, "not a PEM file"},
		{[]string{"bundle", "--tenant", "job-7", "-o", out, "--tenant-start", "yesterday"}, "--tenant-start"},
	} {
		code, _, errOut := gpusnap(t, append(c.args, "--db", db)...)
		if code != 2 || !strings.Contains(errOut, c.want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%q: exit %d, stderr %q; want 2 and %q", c.args, code, errOut, c.want)
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a failed bundle left a file")
	}
	// A symbolic link at the output is refused, even with --force.
	link := filepath.Join(dir, "link")
	os.Symlink(filepath.Join(dir, "target"), link)
	if code, _, errOut := gpusnap(t, "bundle", snaps[1].ID, snaps[2].ID, "-o", link, "--force", "--db", db); code != 2 || !strings.Contains(errOut, "symbolic link") {
		t.Errorf("symlink output: %d %q", code, errOut)
	}
}

// TestDiffBundle runs `diff --tenant --bundle` on the container ghost
// scenario: the bundle is written when the diff fails, holds the same
// findings as diff --json and every involved process's maps diff, and is not
// written when the diff passes, unless --bundle-always.
func TestDiffBundle(t *testing.T) {
	scenario := scenarioDir("leftover-ghost-in-container")
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	side := func(s string) []string {
		return []string{"--db", db, "--tenant", "job-9",
			"--proc-root", filepath.Join(scenario, s, "proc"), "--nvml-fixture", filepath.Join(scenario, s, "nvml.json")}
	}
	if code, _, errOut := gpusnap(t, append([]string{"baseline"}, side("before")...)...); code != 0 {
		t.Fatalf("baseline: %s", errOut)
	}
	// A snapshot while the tenant ran: the bundle tells where the ghost's mapping came from.
	if code, _, errOut := gpusnap(t, append([]string{"snapshot"}, side("during")...)...); code != 0 {
		t.Fatalf("snapshot during: %s", errOut)
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "b.tar.gz")
	code, stdout, errOut := gpusnap(t, append([]string{"diff", "--json", "--bundle", out}, side("after")...)...)
	if code != 1 || !strings.HasPrefix(errOut, "wrote "+out+": ") {
		t.Fatalf("diff --bundle: exit %d, stderr %q", code, errOut)
	}
	var printed diff.Result
	if err := json.Unmarshal([]byte(stdout), &printed); err != nil || printed.MapsDiffs != nil {
		t.Fatalf("diff --json output changed by --bundle: %v\n%s", err, stdout)
	}
	m := verifiedManifest(t, out)
	if m.Tenant != "job-9" || m.Summary.Total != printed.Summary.Total || m.After.ID != printed.To {
		t.Errorf("manifest %+v, diff printed %+v", m, printed.Summary)
	}
	var bundled diff.Result
	if err := json.Unmarshal(memberOf(t, out, "findings.json"), &bundled); err != nil {
		t.Fatal(err)
	}
	if len(bundled.Findings) != len(printed.Findings) || len(bundled.MapsDiffs) == 0 {
		t.Errorf("bundled findings %d (maps diffs %d), printed %d", len(bundled.Findings), len(bundled.MapsDiffs), len(printed.Findings))
	}
	inherited := 0
	for _, f := range bundled.Findings {
		if f.InheritedFrom != "" {
			inherited++
		}
	}
	if inherited == 0 || !bytes.Contains(memberOf(t, out, "report.md"), []byte("- inherited from: `")) {
		t.Error("the bundle does not say where the ghost's mapping came from")
	}
	for key := range bundled.MapsDiffs {
		if len(memberOf(t, out, "maps/"+key+".diff")) == 0 {
			t.Errorf("maps/%s.diff is empty", key)
		}
	}

	// Nothing at or above --fail-on: no bundle, unless --bundle-always.
	quiet := filepath.Join(dir, "quiet.tar.gz")
	if code, _, errOut := gpusnap(t, append([]string{"diff", "--fail-on", "high", "--bundle", quiet}, side("before")...)...); code != 0 || errOut != "" {
		t.Errorf("clean diff --bundle: exit %d, stderr %q", code, errOut)
	}
	if _, err := os.Stat(quiet); err == nil {
		t.Error("a bundle was written for a diff that passed")
	}
	if code, _, errOut := gpusnap(t, append([]string{"diff", "--fail-on", "high", "--bundle", quiet, "--bundle-always"}, side("before")...)...); code != 0 || !strings.Contains(errOut, "wrote ") {
		t.Errorf("--bundle-always: exit %d, stderr %q", code, errOut)
	}
	verifiedManifest(t, quiet)

	if code, _, errOut := gpusnap(t, append([]string{"diff", "--bundle-always"}, side("after")...)...); code != 2 || !strings.Contains(errOut, "--bundle-always needs --bundle FILE") {
		t.Errorf("--bundle-always alone: exit %d, stderr %q", code, errOut)
	}
	// A bundle that cannot be written is a line on stderr after the
	// findings; the findings decide the exit status.
	if code, stdout, errOut := gpusnap(t, append([]string{"diff", "--bundle", out}, side("after")...)...); code != 1 ||
		!strings.Contains(stdout, "leftover_device_mapping") || !strings.Contains(errOut, "exists (use --force") {
		t.Errorf("diff --bundle over an existing file: exit %d, stderr %q", code, errOut)
	}
	// With nothing found, the failure is what there is to say: exit 2.
	if code, _, errOut := gpusnap(t, append([]string{"diff", "--fail-on", "high", "--bundle", out, "--bundle-always"}, side("before")...)...); code != 2 ||
		!strings.Contains(errOut, "exists (use --force") {
		t.Errorf("clean diff --bundle-always over an existing file: exit %d, stderr %q", code, errOut)
	}
}

// memberOf reads one payload file (its name under data/) of a bundle on disk.
func memberOf(t *testing.T, bundleFile, name string) []byte {
	t.Helper()
	f, err := os.Open(bundleFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("%s: no %s: %v", bundleFile, name, err)
		}
		if _, rest, _ := strings.Cut(h.Name, "/"); rest == "data/"+name {
			b, _ := io.ReadAll(tr)
			return b
		}
	}
}

// TestBundleOutputRefusedBeforeCapture: an output that cannot be written (an
// existing file, a symbolic link, a missing directory) fails the bundle
// command before the capture, so it stores no post snapshot. (diff --bundle
// diffs first and says so after: TestLiveDiffBundleRefusedStillReportsGhost.)
func TestBundleOutputRefusedBeforeCapture(t *testing.T) {
	db, _ := storeWith(t, false)
	dir := t.TempDir()
	existing := filepath.Join(dir, "existing.tar.gz")
	os.WriteFile(existing, []byte("evidence of an earlier incident"), 0o600)
	link := filepath.Join(dir, "link.tar.gz")
	os.Symlink(filepath.Join(dir, "target"), link)
	g := []string{"--db", db, "--no-nvml", "--proc-root", quietHost(t)}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"bundle", "--tenant", "job-7", "-o", existing}, "exists (use --force"},
		{[]string{"bundle", "--tenant", "job-7", "-o", dir, "--force"}, "is not a regular file"},
		{[]string{"bundle", "--tenant", "job-7", "-o", link, "--force"}, "symbolic link"},
		{[]string{"bundle", "--tenant", "job-7", "-o", filepath.Join(dir, "no", "b.tar.gz")}, "directory " + filepath.Join(dir, "no") + " does not exist"},
	} {
		args := append(c.args, g...)
		code, out, errs := gpusnap(t, args...)
		oneLine(t, args, code, out, errs, "bundle: ")
		if !strings.Contains(errs, c.want) {
			t.Errorf("%q: stderr %q, want %q", args, errs, c.want)
		}
	}
	if b, _ := os.ReadFile(existing); string(b) != "evidence of an earlier incident" {
		t.Error("the existing file was changed")
	}
	code, list, errs := gpusnap(t, "list", "--json", "--label", "post", "--db", db)
	if code != 0 || strings.Count(list, `"id"`) != 1 { // storeWith's earlier job's post alone
		t.Errorf("a refused bundle stored a post snapshot:\n%s%s", list, errs)
	}
}

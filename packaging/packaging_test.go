package packaging_test

// The package as an operator gets it: make deb builds it, its tree holds
// every file in the paths docs/install.md names, lintian finds no error,
// the units, the Slurm scripts, /etc/default/gpusnap and the docs name one
// set of paths, the prune unit's commands prune a real store, and the
// binary (the installed one under GPUSNAP_TEST_INSTALLED=1) catches a ghost.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/internal/livetest"
	"github.com/gpusnap/gpusnap/internal/testenv"
)

// repo is the repository root, from this package's directory.
const repo = ".."

// installed says whether the tests run the installed package's binary
// (GPUSNAP_TEST_INSTALLED=1, as .ci/run sets after apt-get install).
func installed() bool { return os.Getenv("GPUSNAP_TEST_INSTALLED") == "1" }

func TestMain(m *testing.M) {
	code := m.Run()
	livetest.RemoveGpusnap()
	os.Exit(code)
}

// binary is the gpusnap under test: the installed one, or a build of this tree.
func binary(t *testing.T) string {
	t.Helper()
	if installed() {
		return "/usr/bin/gpusnap"
	}
	return livetest.Gpusnap(t)
}

func read(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repo, path))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// defaults is packaging/default as VAR=VALUE, commented-out settings included.
func defaults(t *testing.T) map[string]string {
	t.Helper()
	vars := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(read(t, "packaging/default")))
	for sc.Scan() {
		line := strings.TrimPrefix(sc.Text(), "#")
		if k, v, ok := strings.Cut(line, "="); ok && regexp.MustCompile(`^GPUSNAP[A-Z_]*$`).MatchString(k) {
			if strings.ContainsAny(v, `"'$ `) {
				t.Errorf("/etc/default/gpusnap: %s: systemd reads this file too: no quotes, spaces or expansions", sc.Text())
			}
			vars[k] = v
		}
	}
	return vars
}

// unitLines is each KEY=VALUE line of a unit, in order.
func unitLines(t *testing.T, unit, key string) []string {
	var vals []string
	for _, line := range strings.Split(read(t, "contrib/systemd/"+unit), "\n") {
		if v, ok := strings.CutPrefix(line, key+"="); ok {
			vals = append(vals, v)
		}
	}
	return vals
}

// TestOnePathSet: the units run /usr/bin/gpusnap with the settings of
// /etc/default/gpusnap, their defaults are its values, the Slurm scripts
// read the same file and find the binary on PATH, and the docs say so.
func TestOnePathSet(t *testing.T) {
	def := defaults(t)
	for _, k := range []string{"GPUSNAP", "GPUSNAP_DB", "GPUSNAP_EVIDENCE_DIR", "GPUSNAP_ALLOW", "GPUSNAP_SYSLOG_SOCKET"} {
		if _, ok := def[k]; !ok {
			t.Errorf("/etc/default/gpusnap does not name %s, which the Slurm scripts read", k)
		}
		if !strings.Contains(read(t, "contrib/slurm/settings.sh"), k) {
			t.Errorf("settings.sh does not read %s", k)
		}
	}
	if def["GPUSNAP"] != "/usr/bin/gpusnap" || def["GPUSNAP_DB"] != "/var/lib/gpusnap/gpusnap.db" {
		t.Errorf("/etc/default/gpusnap: GPUSNAP=%s GPUSNAP_DB=%s", def["GPUSNAP"], def["GPUSNAP_DB"])
	}
	if !strings.Contains(read(t, "contrib/slurm/settings.sh"), `: "${GPUSNAP:=$(command -v gpusnap)}"`) {
		t.Error("settings.sh does not default GPUSNAP to gpusnap on PATH")
	}
	for _, unit := range []string{"gpusnap-watch.service", "gpusnap-prune.service"} {
		if files := unitLines(t, unit, "EnvironmentFile"); !slices.Equal(files, []string{"-/etc/default/gpusnap"}) {
			t.Errorf("%s: EnvironmentFile=%q, want -/etc/default/gpusnap", unit, files)
		}
		for _, env := range unitLines(t, unit, "Environment") {
			for _, kv := range strings.Fields(env) {
				k, v, _ := strings.Cut(kv, "=")
				if def[k] != v {
					t.Errorf("%s: Environment %s=%s, but /etc/default/gpusnap has %q", unit, k, v, def[k])
				}
			}
		}
		starts := strings.Join(unitLines(t, unit, "ExecStart"), "\n")
		if !strings.Contains(starts, "/usr/bin/gpusnap ") {
			t.Errorf("%s does not run /usr/bin/gpusnap: %s", unit, starts)
		}
		for _, m := range regexp.MustCompile(`\$\{?(GPUSNAP_[A-Z_]+)`).FindAllStringSubmatch(starts, -1) {
			if _, ok := def[m[1]]; !ok {
				t.Errorf("%s uses %s, which /etc/default/gpusnap does not set", unit, m[1])
			}
		}
	}
	if def["GPUSNAP_ALLOW"] != diff.DefaultAllowPath || !strings.Contains(read(t, "Makefile"), "$$R"+diff.DefaultAllowPath+" ") {
		t.Errorf("/etc/default/gpusnap has GPUSNAP_ALLOW=%s and make deb must install %s: --allow's default", def["GPUSNAP_ALLOW"], diff.DefaultAllowPath)
	}
	install := read(t, "docs/install.md")
	for _, p := range []string{"/usr/bin/gpusnap", "/etc/default/gpusnap", "/usr/share/gpusnap/slurm/prolog.sh",
		"/usr/share/gpusnap/slurm/epilog.sh", "gpusnap-watch", "gpusnap-prune.timer", "/etc/gpusnap/allow.list",
		"CGO_CFLAGS=-Wno-deprecated-declarations"} {
		if !strings.Contains(install, p) {
			t.Errorf("docs/install.md does not name %s", p)
		}
	}
	for _, doc := range []string{"README.md", "docs/install.md", "docs/watch.md", "contrib/systemd/gpusnap-watch.service",
		"contrib/slurm/prolog.sh", "contrib/slurm/epilog.sh"} {
		if strings.Contains(read(t, doc), "/usr/local/bin/gpusnap") {
			t.Errorf("%s names /usr/local/bin/gpusnap: the package installs /usr/bin/gpusnap", doc)
		}
	}
}

// TestAllowListByExe: the shipped allow list parses, and every entry
// names the exe path: a process's name is the tenant's to choose.
func TestAllowListByExe(t *testing.T) {
	path := filepath.Join(repo, "contrib/allow/allow.list")
	if _, err := diff.LoadAllow(path); err != nil {
		t.Fatal(err)
	}
	var exes []string
	for _, line := range strings.Split(read(t, "contrib/allow/allow.list"), "\n") {
		if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		exe, _, _ := strings.Cut(line, " ")
		if !strings.HasPrefix(exe, "exe=/") || strings.Contains(line, "comm=") {
			t.Errorf("allow list entry %q: want exe=/PATH, not a name", line)
		}
		// A path alone is any tenant's to take (a binary of its image at
		// that path); a system unit's cgroup is root's alone.
		if !strings.Contains(line, " cgroup=/system.slice/") {
			t.Errorf("allow list entry %q: want the cgroup of a system unit beside the exe", line)
		}
		exes = append(exes, filepath.Base(exe))
	}
	for _, want := range []string{"nvidia-persistenced", "nv-hostengine", "nv-fabricmanager", "nvidia-cuda-mps-control",
		"nvidia-cuda-mps-server"} {
		if !slices.Contains(exes, want) {
			t.Errorf("allow list has no entry for %s", want)
		}
	}
}

// TestDeb builds the package with make deb and reads it back.
func TestDeb(t *testing.T) {
	livetest.Require(t, "make", "dpkg-deb", "objdump", "lintian")
	dist, build := t.TempDir(), t.TempDir()
	cmd := exec.Command("make", "-C", repo, "deb", "DIST="+dist, "BUILD="+build)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make deb: %v\n%s", err, out)
	}
	version := strings.TrimSpace(run(t, "make", "-s", "-C", repo, "version"))
	debs, _ := filepath.Glob(filepath.Join(dist, "*.deb"))
	arch := strings.TrimSpace(run(t, "dpkg", "--print-architecture"))
	if want := filepath.Join(dist, "gpusnap_"+version+"_"+arch+".deb"); len(debs) != 1 || debs[0] != want {
		t.Fatalf("make deb wrote %q, want %s", debs, want)
	}
	deb := debs[0]
	if v := strings.TrimSpace(run(t, "dpkg-deb", "-f", deb, "Version")); v != version {
		t.Errorf("package version %q, want %q", v, version)
	}
	contents := run(t, "dpkg-deb", "-c", deb)
	for _, p := range []string{"./usr/bin/gpusnap", "./usr/libexec/gpusnap/gpusnap-full", "./lib/systemd/system/gpusnap-watch.service",
		"./lib/systemd/system/gpusnap-prune.service", "./lib/systemd/system/gpusnap-prune.timer",
		"./usr/share/gpusnap/slurm/prolog.sh", "./usr/share/gpusnap/slurm/epilog.sh", "./usr/share/gpusnap/slurm/settings.sh",
		"./etc/default/gpusnap", "./etc/gpusnap/allow.list", "./usr/share/man/man1/gpusnap.1.gz",
		"./usr/share/man/man1/gpusnap-diff.1.gz", "./usr/share/bash-completion/completions/gpusnap",
		"./usr/share/zsh/vendor-completions/_gpusnap", "./usr/share/fish/vendor_completions.d/gpusnap.fish",
		"./usr/share/doc/gpusnap/copyright", "./usr/share/doc/gpusnap/changelog.gz",
		"./usr/share/doc/gpusnap/spec.md", "./usr/share/doc/gpusnap/diff.md", "./usr/share/doc/gpusnap/triage.md",
		"./usr/share/doc/gpusnap/schema/diff.schema.json", "./usr/share/doc/gpusnap/schema/findings.schema.json"} {
		if !regexp.MustCompile(` root/root .* ` + regexp.QuoteMeta(p) + `\n`).MatchString(contents) {
			t.Errorf("the package lacks %s (owned by root)", p)
		}
	}
	if strings.Contains(contents, "./var/") {
		t.Error("the package ships files under /var: purging it would touch the store's tree")
	}
	tree := t.TempDir()
	run(t, "dpkg-deb", "-R", deb, tree)
	if got, err := os.ReadFile(filepath.Join(tree, "DEBIAN/conffiles")); string(got) != "/etc/default/gpusnap\n/etc/gpusnap/allow.list\n" {
		t.Errorf("conffiles %q (%v)", got, err)
	}
	for _, script := range []string{"preinst", "postinst", "prerm", "postrm"} {
		if _, err := os.Stat(filepath.Join(tree, "DEBIAN", script)); err == nil {
			t.Errorf("the package has a %s: nothing it does may remove the store or the evidence", script)
		}
	}
	// The man pages send the reader to the documents the package installs.
	man := run(t, "sh", "-c", "zcat "+filepath.Join(tree, "usr/share/man/man1/gpusnap-diff.1.gz"))
	for _, want := range []string{"/usr/share/doc/gpusnap/", "/etc/gpusnap/allow.list"} {
		if !strings.Contains(strings.ReplaceAll(man, "\\-", "-"), want) {
			t.Errorf("gpusnap-diff(1) does not name %s", want)
		}
	}
	out := run(t, filepath.Join(tree, "usr/bin/gpusnap"), "--version")
	if !strings.HasPrefix(out, "gpusnap version "+version+"\ncommit:       ") || strings.Contains(out, "built:        unknown") {
		t.Errorf("the packaged gpusnap --version:\n%s", out)
	}
	// gpusnap nri runs the packaged gpusnap-full, found from /usr/bin: only
	// the plugin dials the socket.
	sock := filepath.Join(tree, "no-nri.sock")
	nri := exec.Command(filepath.Join(tree, "usr/bin/gpusnap"), "nri", "--socket", sock, "--evidence-dir", filepath.Join(tree, "evidence"))
	if out, err := nri.CombinedOutput(); nri.ProcessState.ExitCode() != 2 || !strings.Contains(string(out), "gpusnap: nri "+sock+": failed to connect to NRI service") {
		t.Errorf("the packaged gpusnap nri did not run gpusnap-full's plugin (%v):\n%s", err, out)
	}
	// Lintian: errors fail; its other tags are logged for the release notes.
	cmd = exec.Command("lintian", "--allow-root", "--tag-display-limit", "0", deb)
	lint, err := cmd.CombinedOutput()
	if bytes.Contains(lint, []byte("\nE: ")) || bytes.HasPrefix(lint, []byte("E: ")) {
		t.Errorf("lintian reports errors (%v):\n%s", err, lint)
	}
	t.Logf("lintian: %s", strings.TrimSpace(string(lint)))
}

// TestUnitsVerify: systemd accepts the three units as packaged.
func TestUnitsVerify(t *testing.T) {
	livetest.Require(t, "systemd-analyze")
	dir := t.TempDir()
	bin := binary(t)
	for _, unit := range []string{"gpusnap-watch.service", "gpusnap-prune.service", "gpusnap-prune.timer"} {
		text := strings.ReplaceAll(read(t, "contrib/systemd/"+unit), "/usr/bin/gpusnap", bin)
		if err := os.WriteFile(filepath.Join(dir, unit), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// --man=no: the man pages come with the package; verify checks the timer's service beside it.
	cmd := exec.Command("systemd-analyze", "verify", "--man=no", filepath.Join(dir, "gpusnap-watch.service"),
		filepath.Join(dir, "gpusnap-prune.service"), filepath.Join(dir, "gpusnap-prune.timer"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestPruneUnit runs the prune unit's commands, as systemd would with
// /etc/default/gpusnap's settings, on a store of real snapshots and an
// evidence directory: old snapshots go, the tenant's latest baseline stays,
// evidence past its retention goes and newer evidence stays.
func TestPruneUnit(t *testing.T) {
	bin := binary(t)
	dir := t.TempDir()
	db, ev := filepath.Join(dir, "gpusnap.db"), filepath.Join(dir, "evidence")
	g := []string{"--db", db, "--no-nvml", "--proc-root", filepath.Join(repo, "fixtures/proc/gpuhost")}
	if _, err := os.Stat(g[4]); err != nil {
		t.Fatalf("fixture proc root: %v", err)
	}
	run(t, bin, append([]string{"baseline", "--tenant", "job-1"}, g...)...)
	run(t, bin, append([]string{"baseline", "--tenant", "job-1"}, g...)...)
	run(t, bin, append([]string{"snapshot"}, g...)...)
	if err := os.MkdirAll(ev, 0o700); err != nil {
		t.Fatal(err)
	}
	old, fresh := filepath.Join(ev, "job-1.0.tar.gz"), filepath.Join(ev, "job-2.0.tar.gz")
	for _, f := range []string{old, fresh} {
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	longAgo := time.Now().Add(-400 * 24 * time.Hour)
	if err := os.Chtimes(old, longAgo, longAgo); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // workload: the snapshots age past GPUSNAP_RETAIN_SNAPSHOTS=1ms
	env := []string{"PATH=/usr/bin:/bin"}
	for k, v := range defaults(t) {
		env = append(env, k+"="+v)
	}
	env = append(env, "GPUSNAP_DB="+db, "GPUSNAP_EVIDENCE_DIR="+ev, "GPUSNAP_RETAIN_SNAPSHOTS=1ms")
	for _, start := range unitLines(t, "gpusnap-prune.service", "ExecStart") {
		script, ok := strings.CutPrefix(start, "/bin/sh -c '")
		if !ok || !strings.HasSuffix(script, "'") {
			t.Fatalf("ExecStart=%s: want /bin/sh -c '...'", start)
		}
		cmd := exec.Command("/bin/sh", "-c", strings.ReplaceAll(strings.TrimSuffix(script, "'"), "/usr/bin/gpusnap", bin))
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("ExecStart=%s: %v\n%s", start, err, out)
		}
	}
	var left []struct{ Tenant, Label string }
	if err := json.Unmarshal([]byte(run(t, bin, append([]string{"list", "--json"}, g...)...)), &left); err != nil {
		t.Fatal(err)
	}
	if len(left) != 1 || left[0].Tenant != "job-1" {
		t.Errorf("after prune the store holds %+v, want job-1's latest baseline alone", left)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("evidence of 400 days ago is still there (%v)", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("fresh evidence was removed: %v", err)
	}
}

// TestCatchesGhost: the binary, installed or built, finds a ghost left on a
// fake GPU between a baseline and a diff, and exits 1 naming it.
func TestCatchesGhost(t *testing.T) {
	livetest.Require(t, "losetup", "gcc")
	bin := binary(t)
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	loop := livetest.NewLoop(t)
	run(t, bin, "baseline", "--no-nvml", "--db", db, "--tenant", "ghost-check")
	sc := livetest.StartGhost(t, loop, livetest.Options{})
	// Other tests' ghosts on this host make findings too: this one's is looked for by PID.
	cmd := exec.Command(bin, "diff", "--no-nvml", "--db", db, "--tenant", "ghost-check")
	out, err := cmd.Output()
	if code := cmd.ProcessState.ExitCode(); code != 1 {
		t.Fatalf("diff: exit %d (%v), want 1\n%s", code, err, out)
	}
	if _, ok := livetest.ReportFinding(string(out), "leftover_device_mapping", sc.Ghost.PID); !ok {
		t.Errorf("diff does not report leftover_device_mapping of %d:\n%s", sc.Ghost.PID, out)
	}
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("%s %q: %v\n%s%s", name, args, err, out, stderr)
	}
	return string(out)
}

// startupCosts are packages whose init work every command would pay for
// and no command of the release binary needs: urfave/cli's Markdown and
// roff renderers (the man command's alone) and cilium/ebpf's rlimit, whose
// init probes the kernel (docs/performance.md, Start-up).
var startupCosts = []string{
	"github.com/cpuguy83/go-md2man/v2/md2man",
	"github.com/russross/blackfriday/v2",
	"github.com/cilium/ebpf/rlimit",
}

// fullOnly are the packages the common gpusnap leaves to gpusnap-full, which
// its nri command and watch --listen exec: the NRI plugin's stub, its
// WebAssembly runtime and ttrpc, and client_golang's registry with the
// procfs its process collector reads (the textfile writers need neither).
var fullOnly = []string{
	"github.com/containerd/nri/pkg/stub",
	"github.com/tetratelabs/wazero",
	"github.com/containerd/ttrpc",
	"github.com/prometheus/client_golang/prometheus",
	"github.com/prometheus/procfs",
}

// TestReleaseLeavesStartupCostsOut reads the build commands make runs for
// the release binary, for gpusnap-full and for gpusnap-man, which writes the
// package's man pages, and lists what each links: the release binary links
// none of startupCosts and fullOnly, gpusnap-full links fullOnly and none of
// startupCosts, and gpusnap-man still has the renderers its man command
// needs (else the tags the test reads would prove nothing).
func TestReleaseLeavesStartupCostsOut(t *testing.T) {
	testenv.Tools(t, "make")
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = "/usr/local/go/bin/go" // where .ci/run finds the toolchain when PATH lacks it
	}
	build := t.TempDir()
	plan := run(t, "make", "-n", "-s", "-C", repo, "GO="+gobin, "BUILD="+build, build+"/gpusnap", build+"/gpusnap-full", build+"/gpusnap-man")
	tags := map[string]string{}
	built := regexp.MustCompile(` build .*-o (\S+) \./cmd/gpusnap`)
	for line := range strings.Lines(plan) {
		m := built.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		tag := ""
		if f := strings.Fields(line); slices.Contains(f, "-tags") {
			tag = f[slices.Index(f, "-tags")+1]
		}
		tags[filepath.Base(m[1])] = tag
	}
	for _, bin := range []string{"gpusnap", "gpusnap-full", "gpusnap-man"} {
		if _, ok := tags[bin]; !ok {
			t.Fatalf("make builds no %s from ./cmd/gpusnap:\n%s", bin, plan)
		}
	}
	deps := func(tag string) []string {
		return strings.Fields(run(t, gobin, "list", "-deps", "-tags", tag, repo+"/cmd/gpusnap"))
	}
	release, full := deps(tags["gpusnap"]), deps(tags["gpusnap-full"])
	for _, pkg := range append(slices.Clone(startupCosts), fullOnly...) {
		if slices.Contains(release, pkg) {
			t.Errorf("the release gpusnap (tags %q) links %s", tags["gpusnap"], pkg)
		}
	}
	for _, pkg := range startupCosts {
		if slices.Contains(full, pkg) {
			t.Errorf("gpusnap-full (tags %q) links %s", tags["gpusnap-full"], pkg)
		}
	}
	for _, pkg := range fullOnly {
		if !slices.Contains(full, pkg) {
			t.Errorf("gpusnap-full (tags %q) lacks %s: it cannot run nri or watch --listen", tags["gpusnap-full"], pkg)
		}
	}
	if man := deps(tags["gpusnap-man"]); !slices.Contains(man, startupCosts[0]) {
		t.Errorf("gpusnap-man (tags %q) lacks %s: it cannot write the man pages", tags["gpusnap-man"], startupCosts[0])
	}
}

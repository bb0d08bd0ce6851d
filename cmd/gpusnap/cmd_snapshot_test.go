package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/snapshot"
)

// tinyProcRoot is a proc root of two processes, so captures are quick and
// the same from run to run. One has invalid UTF-8 and an escape sequence in
// its name: show --json must still print exactly what snapshot --json did.
func tinyProcRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{
		"stat":            "cpu  1 2 3 4\nbtime 1700000000\n",
		"devices":         "Character devices:\n  1 mem\n195 nvidia-frontend\n",
		"42/stat":         "42 (sleep) S 1 42 42 0 -1 4194304 0 0 0 0 0 0 0 0 20 0 1 0 5000 1000 100 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
		"42/status":       "Name:\tsleep\nPid:\t42\nPPid:\t1\nUid:\t1000\t1000\t1000\t1000\nNSpid:\t42\n",
		"42/cmdline":      "sleep\x00infinity\x00",
		"42/comm":         "sleep\n",
		"42/maps":         "00400000-00401000 r-xp 00000000 08:01 12 /usr/bin/sleep\n",
		"42/cgroup":       "0::/user.slice\n",
		"43/stat":         "43 (python3\xff\x1b[2J) S 1 43 43 0 -1 4194304 0 0 0 0 0 0 0 0 20 0 1 0 6000 1000 100 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
		"43/status":       "Name:\tpython3\nPid:\t43\nPPid:\t1\nUid:\t0\t0\t0\t0\nNSpid:\t43\n",
		"43/cmdline":      "python3\x00train.py\x00",
		"43/comm":         "python3\xff\x1b[2J\n",
		"43/maps":         "7f0000000000-7f0000200000 rw-s 00000000 00:06 7 /dev/nvidia0\n",
		"43/cgroup":       "0::/system.slice/docker-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope\n",
		"43/fdinfo/3":     "pos:\t0\nflags:\t0100002\n",
		"43/ns/.keep":     "",
		"43/fd/.keep":     "",
		"42/fd/.keep":     "",
		"42/fdinfo/.keep": "",
	}
	for name, text := range files {
		path := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// storeArgs are the global flags of a test run against db and a tiny host.
func storeArgs(t *testing.T, db string) []string {
	return []string{"--db", db, "--proc-root", tinyProcRoot(t), "--no-nvml"}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

func TestSnapshotStoresAndShowPrintsItIdentically(t *testing.T) {
	db := filepath.Join(t.TempDir(), "state", "gpusnap.db")
	g := storeArgs(t, db)
	code, out, errs := gpusnap(t, append([]string{"snapshot", "--json", "--tenant", "job-1"}, g...)...)
	if code != 0 {
		t.Fatalf("snapshot: %d %s", code, errs)
	}
	code, list, errs := gpusnap(t, append([]string{"list", "--json"}, g...)...)
	if code != 0 || !strings.Contains(list, `"tenant": "job-1"`) {
		t.Fatalf("list: %d %s %s", code, list, errs)
	}
	id := between(out, `"id": "`, `"`)
	code, shown, errs := gpusnap(t, append(append([]string{"show", "--json"}, g...), id[:17])...)
	if code != 0 {
		t.Fatalf("show: %d %s", code, errs)
	}
	if shown != out {
		t.Errorf("show --json differs from what snapshot --json printed:\n%s\n---\n%s", out, shown)
	}
	code, summary, _ := gpusnap(t, append(append([]string{"show"}, g...), id)...)
	if code != 0 || !strings.Contains(summary, id) || !strings.Contains(summary, "job-1") ||
		!strings.Contains(summary, "1 processes use an NVIDIA device") || !strings.Contains(summary, `\x1b[2J`) {
		t.Errorf("show summary: %d\n%s", code, summary)
	}

	// Without --json the id alone is the last line; --no-store stores nothing.
	code, out, _ = gpusnap(t, append([]string{"snapshot", "--no-store"}, g...)...)
	if code != 0 {
		t.Fatal(code)
	}
	if code, _, errs := gpusnap(t, append(append([]string{"show"}, g...), lastLine(out))...); code != 2 || !strings.Contains(errs, "no such snapshot") {
		t.Errorf("--no-store snapshot was stored: %d %s", code, errs)
	}
	nodb := filepath.Join(t.TempDir(), "none", "gpusnap.db")
	if code, _, _ := gpusnap(t, "snapshot", "--no-store", "--no-nvml", "--db", nodb); code != 0 {
		t.Fatal(code)
	}
	if _, err := os.Stat(filepath.Dir(nodb)); err == nil {
		t.Error("--no-store created the store's directory")
	}
}

func TestBaselineNeedsTenantAndIsFoundAgain(t *testing.T) {
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	g := storeArgs(t, db)
	if code, _, errs := gpusnap(t, append([]string{"baseline"}, g...)...); code != 2 || !strings.Contains(errs, "--tenant") {
		t.Errorf("baseline without tenant: %d %s", code, errs)
	}
	code, out, errs := gpusnap(t, append([]string{"baseline", "--tenant", "job-7"}, g...)...)
	if code != 0 {
		t.Fatalf("baseline: %s", errs)
	}
	id := lastLine(out)
	code, list, _ := gpusnap(t, append([]string{"list", "--label", "baseline", "--tenant", "job-7"}, g...)...)
	if code != 0 || !strings.Contains(list, id) {
		t.Errorf("list of baselines misses %s:\n%s", id, list)
	}
}

func between(s, start, end string) string {
	_, after, _ := strings.Cut(s, start)
	v, _, _ := strings.Cut(after, end)
	return v
}

// A tenant's right-to-left override in its command line reaches --json as
// an escape (the same string to a JSON reader), never as the raw character
// that would reorder the line on an operator's screen.
func TestJSONEscapesBidi(t *testing.T) {
	root := tinyProcRoot(t)
	if err := os.WriteFile(filepath.Join(root, "42", "cmdline"), []byte("sleep\x00\u202egpj.exe\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := gpusnap(t, "snapshot", "--json", "--no-store", "--no-nvml", "--proc-root", root)
	if code != 0 {
		t.Fatalf("snapshot: exit %d: %s", code, stderr)
	}
	if strings.ContainsRune(stdout, 0x202e) || !strings.Contains(stdout, `\u202e`) {
		t.Fatalf("--json carries the override raw, or not at all:\n%s", stdout)
	}
	var s snapshot.Snapshot
	if err := json.Unmarshal([]byte(stdout), &s); err != nil {
		t.Fatal(err)
	}
	for _, p := range s.Processes {
		if p.PID == 42 && strings.Join(p.Cmdline, " ") != "sleep \u202egpj.exe" {
			t.Errorf("decoded command line %q", p.Cmdline)
		}
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/snapshot"
)

const psFixture = "../../fixtures/proc/gpuhost"

func TestPsTable(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"gpusnap", "ps", "--proc-root", psFixture, "--no-nvml"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	// 5000 and 6000 are suspects: each row has a why line under it.
	if len(lines) != 6 || !strings.HasPrefix(lines[0], "PID ") || !strings.HasPrefix(lines[3], "  why: masquerade: exe /tmp/.x/miner lies under /tmp;") ||
		!strings.HasPrefix(lines[5], "  why: masquerade: comm \"srun_task\" disagrees") || !strings.Contains(lines[5], "; next: contain the node") {
		t.Fatalf("want a header, 3 rows (4242, 5000, 6000) and a why line under each suspect:\n%s", out.String())
	}
	for _, tc := range []struct {
		row  int
		want []string
	}{
		{1, []string{"4242 ", " tenant ", " #0 ", "python3 /usr/bin/python3.11", "docker:3f2a9c1e…"}},
		{2, []string{"5000 ", " suspected_compromise ", "1001(eu…", `!python3\n\x1b[31mFAKE /tmp/.x/`, "containerd:c0ff…"}},
		{4, []string{"6000 ", " suspected_compromise ", "slurm:4242", "!srun_task /home/alice/bin/solv"}},
	} {
		for _, w := range tc.want {
			if !strings.Contains(lines[tc.row], w) {
				t.Errorf("row %d lacks %q:\n%s", tc.row, w, lines[tc.row])
			}
		}
	}
	// The header and every row fit 120 columns; the why lines are whole.
	for _, i := range []int{0, 1, 2, 4} {
		if n := utf8.RuneCountInString(lines[i]); n > 120 {
			t.Errorf("line %d is %d columns wide:\n%s", i, n, lines[i])
		}
	}
	// --wide: every column, none cut.
	out.Reset()
	if code := run(context.Background(), []string{"gpusnap", "ps", "--wide", "--proc-root", psFixture, "--no-nvml"}, &out, &errb); code != 0 {
		t.Fatalf("--wide: exit %d: %s", code, errb.String())
	}
	wide := strings.Split(out.String(), "\n")
	for _, tc := range []struct {
		row  int
		want []string
	}{
		{0, []string{"HOLDERS", "MAPPINGS", "PACKAGE", "SHA256"}},
		{1, []string{"docker:3f2a9c1e3f2a", "3:/dev/nvidiactl(rw)", "7:/dev/nvidia0(r)", "/dev/nvidia0 rw-s 2.0MiB", "/dev/nvidia0 r--s 2.0MiB", "anon-exec rwxp 128.0MiB"}},
		{2, []string{"1001(euid 0)", "/tmp/.x/miner (deleted)", "containerd:c0ffee00c0ff pod:1a2b3c4d-5e6f-7a8b-9c0d-112233445566", "4:/dev/nvidiactl(w)", "5:/dev/nvidia1 (deleted)(rw)"}},
		{4, []string{"slurm:4242", "/srv/ctr 2/rootfs/dev/nvidia3 (deleted) rw-p 2.0MiB", "/dev/dri/card0 rw-s 2.0MiB", "/home/alice/bin/solver"}},
	} {
		for _, w := range tc.want {
			if !strings.Contains(wide[tc.row], w) {
				t.Errorf("--wide row %d lacks %q:\n%s", tc.row, w, wide[tc.row])
			}
		}
	}
	// Terminal-safe: no raw control byte of a hostile comm reaches the terminal.
	if !terminalSafe(out.String()) {
		t.Errorf("raw control bytes in the table:\n%q", out.String())
	}
	if errb.Len() != 0 {
		t.Errorf("stderr: %s", errb.String())
	}
}

func TestPsJSON(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"gpusnap", "ps", "--json", "--proc-root", psFixture, "--no-nvml"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var rep struct {
		Host      snapshot.Host      `json:"host"`
		Scan      snapshot.Scan      `json:"scan"`
		Processes []snapshot.Process `json:"processes"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out.String())
	}
	var pids []int
	for _, p := range rep.Processes {
		pids = append(pids, p.PID)
	}
	if !slices.Equal(pids, []int{4242, 5000, 6000}) || rep.Host.Hostname != "gpu-node-17" || rep.Scan.Vanished != 1 {
		t.Errorf("pids %v host %+v scan %+v", pids, rep.Host, rep.Scan)
	}
	if p := rep.Processes[0]; len(p.Holders) != 5 || p.Holders[0].Access != "rw" || p.Mappings[0].Perms != "rw-s" || p.Raw == nil {
		t.Errorf("4242 in JSON: %+v", p)
	}
	var verdicts struct {
		Processes []struct {
			PID    int         `json:"pid"`
			Triage diff.Triage `json:"triage"`
		} `json:"processes"`
	}
	if err := json.Unmarshal(out.Bytes(), &verdicts); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{diff.ClassTenant, diff.ClassSuspectedCompromise, diff.ClassSuspectedCompromise} {
		if v := verdicts.Processes[i]; v.Triage.Class != want || len(v.Triage.Why) == 0 || v.Triage.Next == "" {
			t.Errorf("pid %d: triage %+v, want %s with why and next", v.PID, v.Triage, want)
		}
	}
}

func TestPsNoNVIDIAUser(t *testing.T) {
	var out, errb bytes.Buffer
	root := quietHost(t)
	code := run(context.Background(), []string{"gpusnap", "ps", "--json", "--proc-root", root, "--no-nvml"}, &out, &errb)
	if code != 0 || !strings.Contains(out.String(), `"processes": []`) {
		t.Errorf("exit %d, out %s, err %s", code, out.String(), errb.String())
	}
	out.Reset()
	errb.Reset()
	if code := run(context.Background(), []string{"gpusnap", "ps", "--proc-root", root + "/missing", "--no-nvml"}, &out, &errb); code != 2 ||
		!strings.HasPrefix(errb.String(), "gpusnap: proc root: ") || strings.Count(errb.String(), "\n") != 1 {
		t.Errorf("missing proc root: exit %d, stderr %q", code, errb.String())
	}
}

// ps tells the operator, per GPU whose accounting is off, the one command
// that turns it on: without it a process that comes and goes between two
// snapshots leaves no NVML record.
func TestPsAccountingDisabled(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"gpusnap", "ps", "--proc-root", psFixture,
		"--nvml-fixture", filepath.Join("..", "..", "fixtures", "nvml", "h100x8.json")}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if n := strings.Count(out.String(), "accounting: disabled"); n != 8 || !strings.Contains(out.String(), "(turn it on, as root: nvidia-smi -i 7 -am 1)") {
		t.Errorf("%d GPUs say accounting is off, want 8:\n%s", n, out.String())
	}
}

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/internal/testenv"
	"github.com/gpusnap/gpusnap/internal/testwait"
)

var psNVMLFixture = filepath.Join("..", "..", "fixtures", "nvml", "h100x8.json")

// psPIDs runs ps --json and gives the PIDs of its processes and the
// indexes of its GPUs.
func psPIDs(t *testing.T, args ...string) (pids, gpus []int, stderr string) {
	t.Helper()
	code, stdout, stderr := gpusnap(t, append([]string{"ps", "--json", "--proc-root", psFixture}, args...)...)
	if code != 0 {
		t.Fatalf("ps %v: exit %d: %s", args, code, stderr)
	}
	var rep struct {
		Processes []struct{ PID int }   `json:"processes"`
		GPUs      []struct{ Index int } `json:"gpus"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("ps %v: %v", args, err)
	}
	for _, p := range rep.Processes {
		pids = append(pids, p.PID)
	}
	for _, g := range rep.GPUs {
		gpus = append(gpus, g.Index)
	}
	return pids, gpus, stderr
}

func TestPsPIDFilter(t *testing.T) {
	pids, gpus, stderr := psPIDs(t, "--nvml-fixture", psNVMLFixture, "-p", "4242")
	if !slices.Equal(pids, []int{4242}) || !slices.Equal(gpus, []int{0}) || stderr != "" {
		t.Errorf("-p 4242: pids %v gpus %v stderr %q, want 4242 on GPU 0 alone", pids, gpus, stderr)
	}
	// Repeated and comma lists; a PID that uses no GPU, and one not
	// running, are each one line on stderr, not silence.
	pids, _, stderr = psPIDs(t, "--no-nvml", "-p", "6000,1", "-p", "5000", "-p", "99999")
	want := "gpusnap: pid 1 uses no GPU (NVML lists it on none, and it holds and maps no NVIDIA device)\ngpusnap: pid 99999: no such process\n"
	if !slices.Equal(pids, []int{5000, 6000}) || stderr != want {
		t.Errorf("pids %v stderr %q, want 5000 6000 and %q", pids, stderr, want)
	}
	// The table: that process's row and why line alone.
	code, stdout, _ := gpusnap(t, "ps", "--proc-root", psFixture, "--no-nvml", "-p", "5000")
	if lines := strings.Split(strings.TrimSpace(stdout), "\n"); code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[1], "5000 ") || !strings.HasPrefix(lines[2], "  why: ") {
		t.Errorf("ps -p 5000: exit %d:\n%s", code, stdout)
	}
}

func TestPsGPUFilter(t *testing.T) {
	// GPU 1 by its /dev/nvidia1: 5000 holds it, with no NVML to place it.
	pids, _, stderr := psPIDs(t, "--no-nvml", "--gpu", "1")
	if !slices.Equal(pids, []int{5000}) || stderr != "" {
		t.Errorf("--gpu 1: pids %v stderr %q, want 5000", pids, stderr)
	}
	// By UUID, as check --gpus reads it: NVML links it to minor 0.
	pids, gpus, _ := psPIDs(t, "--nvml-fixture", psNVMLFixture, "--gpu", "GPU-3f2a1c0e-8d4b-4e5f-9a1b-2c3d4e5f6071")
	if !slices.Equal(pids, []int{4242}) || !slices.Equal(gpus, []int{0}) {
		t.Errorf("--gpu UUID: pids %v gpus %v, want 4242 on GPU 0", pids, gpus)
	}
	pids, _, stderr = psPIDs(t, "--no-nvml", "--gpu", "7")
	if len(pids) != 0 || stderr != "gpusnap: no process that could be read uses GPU 7\n" {
		t.Errorf("--gpu 7: pids %v stderr %q", pids, stderr)
	}
	pids, _, stderr = psPIDs(t, "--no-nvml", "--gpu", "1", "-p", "4242")
	if len(pids) != 0 || stderr != "gpusnap: pid 4242 uses no GPU of 1\n" {
		t.Errorf("--gpu 1 -p 4242: pids %v stderr %q", pids, stderr)
	}
}

// A bad value is a usage error: exit 2 and one line on stderr.
func TestPsBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-p", "x"}, {"-p", "0"}, {"-p", "-3"}, {"--gpu", "3-1"}, {"--gpu", ""}, {"--gpu", "256"},
		{"--interval", "10ms"}, {"--interval", "0"}, {"--interval", "soon"}} {
		code, stdout, stderr := gpusnap(t, append([]string{"ps", "--proc-root", psFixture, "--no-nvml"}, args...)...)
		if code != exitError || stdout != "" || !strings.HasPrefix(stderr, "gpusnap: ") || strings.Count(stderr, "\n") != 1 {
			t.Errorf("ps %v: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
	}
}

// ps --interval --json writes one JSON object a line, each a fresh sample
// with its time, until its context ends (SIGINT, SIGTERM): then exit 0.
func TestPsIntervalJSONLines(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	var out, errb strings.Builder
	code := run(ctx, []string{"gpusnap", "ps", "--json", "--interval", "100ms", "--proc-root", psFixture, "--no-nvml", "-p", "4242"}, &out, &errb)
	if code != 0 || errb.Len() != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var times []time.Time
	sc := bufio.NewScanner(strings.NewReader(out.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var rep struct {
			Time      time.Time           `json:"time"`
			Processes []struct{ PID int } `json:"processes"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rep); err != nil {
			t.Fatalf("line %d is not a JSON object: %v\n%s", len(times)+1, err, sc.Text())
		}
		if len(rep.Processes) != 1 || rep.Processes[0].PID != 4242 || (len(times) > 0 && !rep.Time.After(times[len(times)-1])) {
			t.Errorf("line %d: time %v processes %v", len(times)+1, rep.Time, rep.Processes)
		}
		times = append(times, rep.Time)
	}
	if len(times) < 2 {
		t.Errorf("%d samples in 700ms at 100ms:\n%s", len(times), out.String())
	}
}

// On a terminal ps --interval redraws the table in place; the binary runs
// in a tmux pane, and SIGINT (Ctrl-C) ends it with exit 0.
func TestPsIntervalTerminal(t *testing.T) {
	testenv.Tools(t, "tmux")
	bin := filepath.Join(t.TempDir(), "gpusnap")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	fixture, err := filepath.Abs(psFixture)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	sock, status := filepath.Join(dir, "tmux.sock"), filepath.Join(dir, "status")
	tmux := func(args ...string) string {
		out, err := exec.Command("tmux", append([]string{"-S", sock}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("tmux %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	t.Cleanup(func() { _ = exec.Command("tmux", "-S", sock, "kill-server").Run() })
	// The shell traps SIGINT to outlive Ctrl-C and record ps's exit status.
	tmux("new-session", "-d", "-x", "150", "-y", "50", "sh", "-c", "trap : INT; "+
		bin+" ps --interval 200ms --no-nvml -p 4242 --proc-root "+fixture+"; echo $? > "+status+"; sleep 60")
	// Each redraw starts at the top of a cleared screen: after the first
	// sample and three more, still one header and one row, on line one.
	onePane := func() bool {
		screen := tmux("capture-pane", "-p")
		return strings.HasPrefix(screen, "every 200ms: ") && strings.Count(screen, "every ") == 1 &&
			strings.Count(screen, "PPID") == 1 && strings.Count(screen, "\n4242 ") == 1
	}
	testwait.Until(t, 10*time.Second, "the first sample", onePane)
	time.Sleep(600 * time.Millisecond) // workload: three more samples drawn
	if !onePane() {
		t.Fatalf("the pane is not one redrawn sample:\n%s", tmux("capture-pane", "-p"))
	}
	tmux("send-keys", "C-c")
	var b []byte
	testwait.Until(t, 10*time.Second, "ps to end on Ctrl-C", func() bool {
		b, err = os.ReadFile(status)
		return err == nil
	})
	if s := strings.TrimSpace(string(b)); s != "0" {
		t.Errorf("exit %s after Ctrl-C, want 0", s)
	}
}

package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchmarkRefusedAuto: what `--capture auto` costs where the kernel refuses
// the BPF path, against `--capture proc`, in one run, alternated:
//
//	sudo go test -run x -bench RefusedAuto -benchtime 30x ./bench/
//
// The built command runs `snapshot --no-store --no-nvml` as two real callers
// the kernel refuses: nobody (uid 65534, refused the first BPF map) and
// nobody with CAP_BPF alone (refused the programs, after the maps were made
// and the kernel's BTF read: the dear refusal, as of root without
// CAP_PERFMON). Each round runs, in a rotating order, proc; auto with the
// refusal remembered beside its store (primed by one run before); auto
// first, with the record removed before it (the cost every command paid
// before the refusal was remembered); and auto of a store whose directory
// does not exist, remembered in the runtime directory. It reports CPU (user+system of the
// command, from its rusage) and wall time per run, peak RSS, and the ratios:
// auto/proc-cpu is the target (<= 1.05x). Run with 0 and 500 extra sleeps.
func BenchmarkRefusedAuto(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("runs the command as other users: needs root")
	}
	// A directory nobody can enter and write: the command and the stores.
	dir, err := os.MkdirTemp("", "gpusnap-bench-refusal-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		b.Fatal(err)
	}
	bin := buildGpusnap(b, dir)
	const capBPF = 39
	nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
	callers := []struct {
		name string
		attr *syscall.SysProcAttr
	}{
		{"nobody", &syscall.SysProcAttr{Credential: nobody}},
		{"nobody+CAP_BPF", &syscall.SysProcAttr{Credential: nobody, AmbientCaps: []uintptr{capBPF}}},
	}
	for _, extra := range []int{0, 500} {
		b.Run(fmt.Sprintf("extra=%d", extra), func(b *testing.B) {
			startSleepers(b, extra)
			for _, c := range callers {
				b.Run(c.name, func(b *testing.B) { refusedAuto(b, bin, dir, c.attr) })
			}
		})
	}
}

// runCost is the CPU, wall time and peak RSS of runs of one contender.
type runCost struct {
	cpu, wall time.Duration
	maxRSS    int64 // KiB, the largest of any run
}

// refusedAuto alternates the three contenders as the caller attr.
func refusedAuto(b *testing.B, bin, dir string, attr *syscall.SysProcAttr) {
	db := func(name string) string {
		return filepath.Join(dir, strings.ReplaceAll(b.Name(), "/", "-")+"-"+name+".db")
	}
	// A store whose directory does not exist: the record is the runtime
	// directory's, one of this caller's own.
	runtimeDir := db("run")
	if err := os.Mkdir(runtimeDir, 0o700); err != nil {
		b.Fatal(err)
	}
	if err := os.Chmod(runtimeDir, 0o777); err != nil { // past the umask: the callers make their directory in it
		b.Fatal(err)
	}
	contenders := []struct {
		name, capture, db string
		forget            bool // remove the refusal record before each run
	}{
		{"proc", "proc", db("proc"), false},
		{"auto", "auto", db("auto"), false},
		{"auto-first", "auto", db("first"), true},
		{"auto-nostore", "auto", filepath.Join(db("absent"), "gpusnap.db"), false},
	}
	costs := make([]runCost, len(contenders))
	run := func(i int) string {
		c := contenders[i]
		if c.forget {
			if err := os.Remove(c.db + ".bpf-refusal"); err != nil && !os.IsNotExist(err) {
				b.Fatal(err)
			}
		}
		cmd := exec.Command(bin, "--no-nvml", "--capture", c.capture, "--db", c.db, "snapshot", "--no-store")
		cmd.SysProcAttr = attr
		cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+runtimeDir)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		start := time.Now()
		if err := cmd.Run(); err != nil {
			b.Fatalf("%s: %v: %s", c.name, err, stderr.String())
		}
		costs[i].wall += time.Since(start)
		ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		costs[i].cpu += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		costs[i].maxRSS = max(costs[i].maxRSS, ru.Maxrss)
		return stderr.String()
	}
	// Prime auto's record, and check that each contender is what it says.
	if note := run(1); !strings.Contains(note, "BPF capture not taken") {
		b.Fatalf("auto was not refused: %s", note)
	}
	if note := run(1); !strings.Contains(note, "remembered from") {
		b.Fatalf("auto did not remember the refusal: %s", note)
	}
	if note := run(2); strings.Contains(note, "remembered from") {
		b.Fatalf("auto-first remembered: %s", note)
	}
	if note := run(3) + run(3); !strings.Contains(note, "remembered from") {
		b.Fatalf("auto without a store directory did not remember the refusal: %s", note)
	}
	costs = make([]runCost, len(contenders))
	round := 0
	for b.Loop() {
		for k := range contenders {
			run((round + k) % len(contenders))
		}
		round++
	}
	n := float64(b.N)
	for i, c := range contenders {
		b.ReportMetric(float64(costs[i].cpu)/n/1e6, c.name+"-cpu-ms")
		b.ReportMetric(float64(costs[i].wall)/n/1e6, c.name+"-wall-ms")
		b.ReportMetric(float64(costs[i].maxRSS)/1024, c.name+"-maxrss-MiB")
	}
	b.ReportMetric(float64(costs[1].cpu)/float64(costs[0].cpu), "auto/proc-cpu")
	b.ReportMetric(float64(costs[1].wall)/float64(costs[0].wall), "auto/proc-wall")
	b.ReportMetric(float64(costs[2].cpu)/float64(costs[0].cpu), "first/proc-cpu")
	b.ReportMetric(float64(costs[3].cpu)/float64(costs[0].cpu), "nostore/proc-cpu")
	b.ReportMetric(float64(costs[3].wall)/float64(costs[0].wall), "nostore/proc-wall")
	b.ReportMetric(float64(countProcesses(b)), "procs")
}

package diff

import (
	"cmp"
	"fmt"
	"path"
	"strings"

	"github.com/gpusnap/gpusnap/internal/lazyregexp"
	"github.com/gpusnap/gpusnap/snapshot"
)

// KindUnexpectedGPUProcess means a live process uses a GPU at TO and did not at FROM.
const KindUnexpectedGPUProcess = "unexpected_gpu_process"

var _ = register(&Rule{
	Kind: KindUnexpectedGPUProcess, Title: "Unexpected GPU process",
	Severities: []Severity{Medium, High},
	GPUUse:     true,
	compare:    []func(*comparison) []Finding{unexpectedGPUProcesses},
	Order:      50,
})

// unexpectedGPUProcesses reports a live process that uses a GPU at TO (NVML
// lists it, it holds or maps an NVIDIA device, or it works on another
// vendor's accelerator) and did not at FROM. High when it shows a
// masquerade (see masquerade).
func unexpectedGPUProcesses(c *comparison) []Finding {
	var out []Finding
	seen := make(map[*snapshot.Process]bool)
	check := func(p *snapshot.Process) {
		if seen[p] || c.sparedMPSServer(p) {
			return
		}
		seen[p] = true
		nvml := c.toNVML.byPID[p.PID]
		if c.staleEntry(p.PID) != "" {
			// NVML's entry belongs to the process that had the PID before.
			// That is an orphan, reported as such, not this process's use.
			nvml = nil
		}
		if len(nvml) == 0 && !p.UsesNVIDIA() && !p.AcceleratorWork(c.to.Accelerators) {
			return
		}
		before := c.fromByKey[idOf(p.PID, p.StartTime)]
		if usedNVIDIA(before, c.fromNVML) || before != nil && before.AcceleratorWork(c.from.Accelerators) {
			return
		}
		out = append(out, c.unexpected(p, before, nvml))
	}
	for _, ch := range c.deviceUsers {
		check(ch.proc)
	}
	for _, pl := range c.toNVML.pools {
		for _, e := range pl.procs {
			if p := c.toByPID[e.proc.PID]; p != nil && !p.Defunct() {
				check(p) // a defunct process's entry is an orphan
			}
		}
	}
	return out
}

func (c *comparison) unexpected(p, before *snapshot.Process, nvml []nvmlEntry) Finding {
	ref := processRef(p)
	var evidence []string
	gpu := ""
	for _, e := range nvml {
		evidence = append(evidence, entryEvidence(e))
		gpu = cmp.Or(gpu, e.pool.uuid)
	}
	// A sample counts where NVML lists no process (a list it could not
	// give), but not one of an earlier process that had the PID.
	if c.staleEntry(p.PID) == "" {
		for _, u := range c.toNVML.util[p.PID] {
			evidence = append(evidence, fmt.Sprintf("nvml: utilization on GPU %s: sm %d%%, memory %d%%",
				u.gpu, u.sample.SMUtil, u.sample.MemUtil))
		}
	}
	for _, u := range deviceUses(p, c.toAccel) {
		if !u.gpuWork() {
			continue
		}
		if u.nvidia() {
			gpu = cmp.Or(gpu, c.gpuUUID(u.gpuMinor))
		}
		if len(u.mappings) > 0 {
			evidence = append(evidence, fmt.Sprintf("maps %s (%s)", u.device, count(len(u.mappings), "mapping")))
		}
		if len(u.holders) > 0 {
			evidence = append(evidence, fmt.Sprintf("holds %s (%s)", u.device, count(len(u.holders), "descriptor")))
		}
		evidence = append(evidence, c.accelEvidence(p, u)...)
	}
	signs := masquerade(p)
	sev := Medium
	if len(signs) > 0 {
		sev = High
		evidence = append(evidence, signs...)
	}
	since := "a process new since FROM"
	if before != nil {
		since = "alive at FROM without a GPU"
	}
	return Finding{
		Kind:     KindUnexpectedGPUProcess,
		Severity: sev,
		Summary:  fmt.Sprintf("%s uses a GPU; %s", describe(ref), since),
		Process:  ref,
		GPUUUID:  gpu,
		Evidence: evidence,
	}
}

// stagingDirs are where droppers put what they run, since anyone can write
// there and no package installs an executable there.
var stagingDirs = []string{"/tmp/", "/var/tmp/", "/dev/shm/"}

// masquerade lists the signs that a process hides what it is. They are an
// exe under a staging directory or a hidden directory (not a per-user
// toolchain's), deleted, or named otherwise than its comm, and a user process
// named like a kernel thread.
func masquerade(p *snapshot.Process) []string {
	var signs []string
	if !p.KernelThread && kernelThreadName().MatchString(p.Comm) {
		// Only the kernel sets PF_KTHREAD, so a process without it named
		// kworker/u8:3 chose the name to hide in ps.
		signs = append(signs, fmt.Sprintf("masquerade: a user process named like a kernel thread (comm \"%s\")", p.Comm))
	}
	if p.Exe == "" {
		return signs // an unreadable exe (kernel thread, refused) is no evidence either way
	}
	for _, dir := range stagingDirs {
		if strings.HasPrefix(p.Exe, dir) {
			signs = append(signs, fmt.Sprintf("masquerade: exe %s lies under %s", p.Exe, strings.TrimSuffix(dir, "/")))
		}
	}
	if hidden := hiddenElement(p.Exe); hidden != "" {
		signs = append(signs, fmt.Sprintf("masquerade: exe %s lies under hidden %s", p.Exe, hidden))
	}
	if p.ExeDeleted {
		signs = append(signs, fmt.Sprintf("masquerade: exe %s was deleted after the process started", p.Exe))
	}
	if !commMatchesExe(p.Comm, p.Exe) {
		signs = append(signs, fmt.Sprintf("masquerade: comm \"%s\" disagrees with exe %s", p.Comm, p.Exe))
	}
	return signs
}

// Masquerade lists the signs that p hides what it is, as the findings and
// their triage weigh them. ps marks a process by them.
func Masquerade(p *snapshot.Process) []string { return masquerade(p) }

// kernelThreadName matches the names the kernel gives its own threads, as
// ps shows them, the per-CPU and per-device workers and the singletons.
var kernelThreadName = lazyregexp.New(`^(kworker|ksoftirqd|migration|cpuhp|idle_inject|irq|watchdog|kswapd|kcompactd|jbd2|rcuog|rcuop|rcuos)/|` +
	`^(kthreadd|kswapd[0-9]*|khugepaged|ksmd|kauditd|kdevtmpfs|oom_reaper|rcu_sched|rcu_preempt|rcu_gp|rcu_par_gp|kblockd|writeback)$`)

// toolchainDirs are the hidden directories per-user toolchains install
// interpreters and tools in. An exe there is what a user's job runs, not a
// hiding place. They count in a home directory (/home/USER, /root), and a
// virtual environment's anywhere.
var toolchainDirs = map[string]bool{
	".pyenv": true, ".conda": true, ".local": true, ".venv": true, ".virtualenvs": true,
	".cargo": true, ".rustup": true, ".nvm": true, ".julia": true, ".juliaup": true,
}

// buildCaches are the directories below ~/.cache where build tools put what
// they build and run (Bazel's output base, ~/.cache/bazel/_bazel_USER/...).
// A job's binary there is its build's, not a hiding place.
var buildCaches = map[string]bool{"bazel": true, "bazelisk": true, "pants": true}

// venvDirs are the toolchain directories that count wherever they lie.
var venvDirs = map[string]bool{".venv": true, ".virtualenvs": true}

// hiddenElement returns the first directory of exe's path whose name starts
// with a dot ("/home/u/.cache/"), or "" when there is none or it is a
// per-user toolchain's (toolchainDirs) or a build cache's (buildCaches).
func hiddenElement(exe string) string {
	elems := strings.Split(path.Dir(exe), "/")
	for i, e := range elems {
		if !strings.HasPrefix(e, ".") || e == "." || e == ".." {
			continue
		}
		inHome := (i == 3 && elems[1] == "home") || (i == 2 && elems[1] == "root")
		if venvDirs[e] || (inHome && toolchainDirs[e]) || (inHome && e == ".cache" && i+1 < len(elems) && buildCaches[elems[i+1]]) {
			return ""
		}
		return "directory " + strings.Join(elems[:i+1], "/")
	}
	return ""
}

// commLen is TASK_COMM_LEN less its NUL, as the kernel keeps 15 bytes of a name.
const commLen = 15

// interpreters run scripts and runtimes, whose comm is rarely the exe's name.
// A script started through its #! line takes the script's name ("./train.py"
// gives "train.py"), and runtimes rename their main thread (PyTorch's
// "pt_main_thread").
var interpreters = lazyregexp.New(`^(python|pypy|perl|ruby|node|nodejs|java|bash|sh|dash|zsh|ksh|mksh|busybox|lua|luajit|julia|php|R|Rscript|tclsh|deno|bun|dotnet|mono)[0-9.]*$`)

// commMatchesExe reports whether a process's comm fits its exe, as the exe's
// name cut to 15 bytes, a versioned name (python3 for python3.11, vim for
// vim.basic through an alternatives link), or any comm for an interpreter.
func commMatchesExe(comm, exe string) bool {
	base := path.Base(exe)
	if comm == base[:min(len(base), commLen)] || interpreters().MatchString(base) {
		return true
	}
	short, long := comm, base
	if len(short) > len(long) {
		short, long = long, short
	}
	if short == "" || !strings.HasPrefix(long, short) {
		return false
	}
	if len(short) == len(long) {
		return true // a comm as long as its exe's name, past the kernel's limit, comes from a proc root, not the kernel
	}
	next := long[len(short)]
	return next == '.' || next == '-' || next == '_' || (next >= '0' && next <= '9')
}

package capture

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/capture/procfs"
	"github.com/gpusnap/gpusnap/internal/livetest"
	"github.com/gpusnap/gpusnap/internal/testwait"
	"github.com/gpusnap/gpusnap/snapshot"
)

// The check itself: an identity is taken from the cache only where every
// exec mark and the comm are those the cache holds, and the marks were read.
func TestRecallNeedsEveryMarkAndComm(t *testing.T) {
	marks := procfs.ExecMarks{0x5000, 0x6000, 0x7ffd0000, 0x8000, 0x9000, 0xa000, 0x7ffd1000, 0x7ffd1040, 0x7ffd1040, 0x7ffd2000}
	key := procKey{pid: 42, start: 1000}
	c := &processCache{entries: map[procKey]*cachedIdentity{key: {marks: marks, comm: "trainer", nspid: []int{42}}}}
	same := procfs.Stat{Comm: "trainer", Marks: marks}
	if c.recall(key, same) == nil {
		t.Fatal("the same marks and comm: not recalled")
	}
	for i := range marks {
		st := same
		st.Marks[i]++
		if c.recall(key, st) != nil {
			t.Errorf("mark %d changed (an exec, or PR_SET_MM): recalled", i)
		}
	}
	renamed := same
	renamed.Comm = "renamed"
	unread := procfs.Stat{Comm: "trainer"} // stat's marks hidden from a caller not allowed to ptrace: 0
	for name, st := range map[string]procfs.Stat{"another comm": renamed, "marks not read": unread} {
		if c.recall(key, st) != nil {
			t.Errorf("%s: recalled", name)
		}
	}
	if c.recall(procKey{pid: 42, start: 1001}, same) != nil {
		t.Error("another process of the same PID: recalled")
	}
	var none *processCache
	if none.recall(key, same) != nil {
		t.Error("no cache: recalled")
	}
}

// The file holds what it was given, for its boot and pid namespace only; a
// damaged one is an empty cache and a note.
func TestProcessCacheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "processes")
	c, note := loadProcessCache(path, "boot-1", "pid:[1]")
	if note != "" || len(c.entries) != 0 {
		t.Fatalf("no file: %d entries, note %q", len(c.entries), note)
	}
	e := &cachedIdentity{marks: procfs.ExecMarks{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, comm: "a b", exe: "/x (deleted)", nspid: []int{7, 1}, pidNS: "pid:[9]"}
	results := []result{{p: snapshot.Process{PID: 7, StartTime: 99}, cache: e}, {p: snapshot.Process{PID: 8}}, {p: snapshot.Process{PID: 9}, cache: e, vanished: true}}
	if note := c.save(context.Background(), results); note != "" {
		t.Fatal(note)
	}
	again, note := loadProcessCache(path, "boot-1", "pid:[1]")
	if got := again.entries[procKey{7, 99}]; note != "" || len(again.entries) != 1 || got == nil ||
		got.marks != e.marks || got.comm != e.comm || got.exe != e.exe ||
		!slices.Equal(got.nspid, e.nspid) || got.pidNS != e.pidNS {
		t.Fatalf("read back: %d entries, note %q, entry %+v, want %+v", len(again.entries), note, got, e)
	}
	for _, other := range [][2]string{{"boot-2", "pid:[1]"}, {"boot-1", "pid:[2]"}} {
		if c, note := loadProcessCache(path, other[0], other[1]); note != "" || len(c.entries) != 0 {
			t.Errorf("boot %s, namespace %s: %d entries, note %q; want none, quietly", other[0], other[1], len(c.entries), note)
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data[:len(data)-3], 0o600); err != nil {
		t.Fatal(err)
	}
	if c, note := loadProcessCache(path, "boot-1", "pid:[1]"); !strings.Contains(note, "malformed") || len(c.entries) != 0 {
		t.Errorf("a cut file: %d entries, note %q; want none and a note", len(c.entries), note)
	}
}

// waitingShell starts sh -c script with a pipe to its stdin: each line the
// test writes lets the script go on past one `read`.
func waitingShell(t *testing.T, script string, args ...string) (*exec.Cmd, func()) {
	t.Helper()
	cmd := exec.Command("sh", append([]string{"-c", script}, args...)...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, func() {
		if _, err := in.Write([]byte("go\n")); err != nil {
			t.Fatal(err)
		}
	}
}

// pathRecorder is a capture's fault hook that refuses nothing and keeps the
// paths read.
type pathRecorder struct {
	mu    sync.Mutex
	paths map[string]bool
}

func (r *pathRecorder) fault(path string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.paths[path] = true
	return nil
}

func (r *pathRecorder) read(path string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.paths[path]
}

// A process that exec'd, moved its cgroup, changed its name, its uids or its
// arguments in place between two captures shows what it is now in the
// second, while one that did none of them is not asked its pid namespace
// again. The exec is of the same binary under the same name: only stat's
// exec marks reveal it, so a cache trusted without them would show the
// first command line. The uids and the arguments change without an exec, so
// those processes are taken from the cache and must still be read.
func TestProcessCacheSeesChanges(t *testing.T) {
	livetest.Require(t, "sh", "sleep", "perl", "python3")
	cgDir, cgPath := livetest.Cgroup(t)
	execs, goExec := waitingShell(t, `read x; exec sh -c 'read y' after-the-exec-a-longer-command-line`, "before")
	mover, _ := waitingShell(t, `read x`)
	renamer, goRename := waitingShell(t, `read x; printf renamed > /proc/$$/comm; read y`)
	still, _ := waitingShell(t, `read x`)
	setuid, goSetuid := waitingShell(t, `exec perl -e '<STDIN>; $< = $> = 65534; <STDIN>'`)
	rewriter, goRewrite := waitingShell(t, `exec "$0" -c "$1"`, pythonExecutable(t), rewriteArgs)
	opts := Options{Path: PathProc, ProcessCache: filepath.Join(t.TempDir(), "processes")}
	var second recorded
	firstRec := captureRecorded(t, opts)
	first := firstRec.snap
	// Where the uids come from a pidfd (Linux 6.13), a process read whole
	// has its ns/pid link read and one taken from the cache does not.
	// Elsewhere status is read for every process and the cache spares
	// nothing to see.
	nsPid := func(pid int) string { return "/proc/" + strconv.Itoa(pid) + "/ns/pid" }
	spares := firstRec.paths.read(nsPid(still.Process.Pid))
	recalled := func(what string, pid int) {
		if spares && second.paths.read(nsPid(pid)) {
			t.Errorf("%s: %s read again, so the cache was not tried", what, nsPid(pid))
		}
	}

	goExec()
	goRename()
	goSetuid()
	goRewrite()
	if err := os.WriteFile(filepath.Join(cgDir, "cgroup.procs"), []byte(strconv.Itoa(mover.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	wantExec := []string{"sh", "-c", "read y", "after-the-exec-a-longer-command-line"}
	waitFor(t, "the exec", func() bool { return slices.Equal(cmdlineOf(execs.Process.Pid), wantExec) })
	waitFor(t, "the rename", func() bool { return commOf(renamer.Process.Pid) == "renamed" })
	waitFor(t, "the rewrite", func() bool { c := cmdlineOf(rewriter.Process.Pid); return len(c) > 0 && c[0] == "rewritten" })
	waitFor(t, "the setuid", func() bool { return uidsOf(setuid.Process.Pid) == "65534\t65534\t" })
	second = captureRecorded(t, opts)

	was, is := findPID(t, first, execs.Process.Pid), findPID(t, second.snap, execs.Process.Pid)
	if was.Comm != is.Comm || was.Exe != is.Exe {
		t.Fatalf("the exec changed comm %q->%q or exe %q->%q: the test no longer proves the marks needed", was.Comm, is.Comm, was.Exe, is.Exe)
	}
	if !slices.Equal(is.Cmdline, wantExec) {
		t.Errorf("after an exec: command line %q, want %q", is.Cmdline, wantExec)
	}
	if got := findPID(t, second.snap, mover.Process.Pid).Cgroups; !slices.ContainsFunc(got, func(l string) bool { return strings.HasSuffix(l, ":"+cgPath) }) {
		t.Errorf("after a move to %s: cgroups %q", cgPath, got)
	}
	if got := findPID(t, second.snap, renamer.Process.Pid); got.Comm != "renamed" || len(got.Cmdline) != 3 {
		t.Errorf("after a rename: comm %q, command line %q", got.Comm, got.Cmdline)
	}
	if was, is := findPID(t, first, setuid.Process.Pid), findPID(t, second.snap, setuid.Process.Pid); was.UID != 0 || is.UID != 65534 || is.EUID != 65534 {
		t.Errorf("after a setuid without an exec: uid %d, euid %d (%d before), want 65534", is.UID, is.EUID, was.UID)
	}
	recalled("the process that changed its uids", setuid.Process.Pid)
	if was, is := findPID(t, first, rewriter.Process.Pid), findPID(t, second.snap, rewriter.Process.Pid); was.Comm != is.Comm || len(is.Cmdline) == 0 || is.Cmdline[0] != "rewritten" {
		t.Errorf("after its arguments were rewritten in place: comm %q->%q, command line %q, want rewritten first", was.Comm, is.Comm, is.Cmdline)
	}
	recalled("the process that rewrote its arguments", rewriter.Process.Pid)
	recalled("a process unchanged since the last capture", still.Process.Pid)
	p := findPID(t, second.snap, still.Process.Pid)
	if want := findPID(t, first, still.Process.Pid); !slices.Equal(p.Cmdline, want.Cmdline) || p.PIDNamespace != want.PIDNamespace || p.PIDNamespace == "" {
		t.Errorf("a process unchanged: command line %q, namespace %q; the first capture said %q, %q", p.Cmdline, p.PIDNamespace, want.Cmdline, want.PIDNamespace)
	}
}

// rewriteArgs is a Python program that, once told to, writes over its own
// arguments in memory (between stat's arg_start and arg_end), as
// setproctitle does, without an exec and without renaming itself.
const rewriteArgs = `import ctypes, sys
sys.stdin.readline()
f = open("/proc/self/stat").read().rsplit(")", 1)[1].split()
start, end = int(f[45]), int(f[46])
new = b"rewritten\0" + b"x" * (end - start - 11) + b"\0"
ctypes.memmove(start, new, len(new))
sys.stdin.readline()
`

// pythonExecutable is the interpreter python3 runs, which may be behind a
// wrapper script that execs it (pyenv's shims): the test's process must be
// the interpreter from the first capture on.
func pythonExecutable(t *testing.T) string {
	out, err := exec.Command("python3", "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		t.Fatalf("python3: %v", err)
	}
	return strings.TrimSpace(string(out))
}

type recorded struct {
	snap  *snapshot.Snapshot
	paths *pathRecorder
}

func captureRecorded(t *testing.T, opts Options) recorded {
	t.Helper()
	rec := &pathRecorder{paths: map[string]bool{}}
	snap, err := capture(context.Background(), WithoutTriage(opts), rec.fault)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range snap.Scan.Errors {
		if strings.Contains(e, "process cache") {
			t.Fatal(e)
		}
	}
	return recorded{snap, rec}
}

func cmdlineOf(pid int) []string {
	data, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return procfs.ParseCmdline(string(data))
}

func commOf(pid int) string {
	data, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return strings.TrimSpace(string(data))
}

// uidsOf is the real and effective uid of process pid as its status shows
// them, each followed by a tab.
func uidsOf(pid int) string {
	data, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	for line := range strings.Lines(string(data)) {
		if uids, ok := strings.CutPrefix(line, "Uid:\t"); ok {
			f := strings.Fields(uids)
			if len(f) >= 2 {
				return f[0] + "\t" + f[1] + "\t"
			}
		}
	}
	return ""
}

func waitFor(t *testing.T, what string, done func() bool) {
	t.Helper()
	if err := testwait.For(20*time.Second, what, done); err != nil {
		t.Fatal(err)
	}
}

// A cache file that is damaged, of another version, or no regular file (a
// link, a FIFO) is no cache: the capture says so in its errors and reads
// every process whole. A damaged file is replaced by a good one, which the
// next capture takes without a word, but a link or FIFO is left as it is
// (nothing is written through or over a link) and noted again each time.
func TestProcessCacheDamagedIsIgnored(t *testing.T) {
	livetest.Require(t, "sh")
	still, _ := waitingShell(t, `read x`)
	nsPid := "/proc/" + strconv.Itoa(still.Process.Pid) + "/ns/pid"
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	captureRecorded(t, Options{Path: PathProc, ProcessCache: good})
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		plant    func(path string) error
		replaced bool
	}{
		{"cut", func(path string) error { return os.WriteFile(path, data[:len(data)-2], 0o600) }, true},
		{"other version", func(path string) error { return os.WriteFile(path, []byte("gpusnap process cache 0\n"), 0o600) }, true},
		{"not a cache", func(path string) error { return os.WriteFile(path, []byte(`{"binaries":[]}`), 0o600) }, true},
		{"a symlink", func(path string) error { return os.Symlink(good, path) }, false},
		{"a FIFO", func(path string) error { return syscall.Mkfifo(path, 0o600) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			if err := tc.plant(path); err != nil {
				t.Fatal(err)
			}
			captureIgnoring(t, path, nsPid)
			if !tc.replaced {
				captureIgnoring(t, path, nsPid)
				if st, err := os.Lstat(path); err != nil || st.Mode().IsRegular() {
					t.Errorf("%s: replaced (%v, %v)", path, st, err)
				}
			} else if again := captureRecorded(t, Options{Path: PathProc, ProcessCache: path}); again.paths.read(nsPid) {
				t.Errorf("the file written in its place: %s read again", nsPid)
			}
		})
	}
}

// captureIgnoring captures with the process cache at path, which must be
// noted as ignored, with the file read read (the ns/pid link of a process,
// which the cache would spare).
func captureIgnoring(t *testing.T, path, read string) {
	t.Helper()
	rec := &pathRecorder{paths: map[string]bool{}}
	snap, err := capture(context.Background(), WithoutTriage(Options{Path: PathProc, ProcessCache: path}), rec.fault)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(snap.Scan.Errors, func(e string) bool {
		return strings.HasPrefix(e, "process cache: "+path+": ") && strings.HasSuffix(e, "(every process is read whole)")
	}) {
		t.Errorf("no note of the cache in the scan's errors %q", snap.Scan.Errors)
	}
	if !rec.read(read) {
		t.Errorf("%s not read through a cache that is none", read)
	}
}

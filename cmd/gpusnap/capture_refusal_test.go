package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gpusnap/gpusnap/internal/livetest"
)

// tracedCapture is one `gpusnap snapshot --json` traced by strace: what it
// said about its capture path, and what it asked the kernel.
type tracedCapture struct {
	path, note, stderr string
	// loads are the bpf() calls that load programs or BTF: every gpusnap
	// makes one map at start (cilium/ebpf's rlimit probe), a capture
	// that tries BPF loads.
	loads, btfOpens int
}

// traceCapture runs `gpusnap snapshot --json` (and flags) under strace, as root kept
// to CAP_BPF alone (setpriv) when limited: the kernel then refuses the
// capture iterators' programs (they need CAP_PERFMON too), after their maps
// were made and its BTF read, the dear kind of refusal.
func traceCapture(t *testing.T, db string, limited bool, flags ...string) tracedCapture {
	t.Helper()
	log := filepath.Join(t.TempDir(), "strace.log")
	cmd := gpusnapProc(append([]string{"snapshot", "--json", "--no-nvml", "--db", db}, flags...)...)
	// --seccomp-bpf stops the capture only at the calls counted, not at
	// every call of its read of each process on the host.
	args := []string{"strace", "-f", "--seccomp-bpf", "-qq", "-e", "trace=bpf,openat", "-o", log}
	if limited {
		args = append(args, "setpriv", "--bounding-set=-all,+bpf", "--inh-caps=-all,+bpf", "--")
	}
	// In a mount namespace of its own without the host's BPF filesystem: the
	// iterators a root capture elsewhere on the host pinned there would be
	// read by a capture the kernel refuses to load them for.
	unpinned := []string{"unshare", "--mount", "--propagation", "private", "--",
		"sh", "-c", `umount -l /sys/fs/bpf 2>/dev/null; exec "$@"`, "sh"}
	cmd.Args = append(append(unpinned, args...), cmd.Args...)
	cmd.Path, _ = exec.LookPath("unshare")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("traced snapshot: %v: %s", err, stderr.String())
	}
	var snap struct {
		Scan struct {
			Path string `json:"capture_path"`
			Note string `json:"capture_note"`
		} `json:"scan"`
	}
	if err := json.Unmarshal([]byte(stdout.String()), &snap); err != nil {
		t.Fatalf("snapshot --json: %v", err)
	}
	trace, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	c := tracedCapture{path: snap.Scan.Path, note: snap.Scan.Note, stderr: stderr.String()}
	for line := range strings.SplitSeq(string(trace), "\n") {
		switch {
		case strings.Contains(line, " bpf(BPF_PROG_LOAD") || strings.Contains(line, " bpf(BPF_BTF_LOAD"):
			c.loads++
		case strings.Contains(line, `"/sys/kernel/btf/vmlinux"`):
			c.btfOpens++
		}
	}
	return c
}

// editRecord rewrites one field of the refusal record, as a record left
// by an earlier boot or kernel holds another value.
func editRecord(t *testing.T, record, field, value string) {
	t.Helper()
	data, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(data, &rec); err != nil {
		t.Fatal(err)
	}
	rec[field] = value
	if data, err = json.Marshal(rec); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(record, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// The kernel's refusal of the BPF capture is paid once a boot: the capture
// that met it writes the record beside the store, and the next one loads no
// program and reads no BTF, and says in its note that it remembered.
// A record of another boot id or kernel release is retried (and replaced);
// one of another user is ignored with a line on stderr, and retried; and
// the refusal of root kept to CAP_BPF is no reason for root itself not to
// try, nor does it undo the record.
func TestLiveRefusedCaptureRemembered(t *testing.T) {
	livetest.Require(t, "strace", "setpriv", "unshare")
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	record := db + ".bpf-refusal"
	tried := func(name string, c tracedCapture) {
		t.Helper()
		if c.path != "proc" || c.loads == 0 || c.btfOpens == 0 || strings.Contains(c.note, "remembered") {
			t.Errorf("%s: path %s, %d bpf() loads, %d opens of the kernel's BTF, note %q: want BPF tried and refused", name, c.path, c.loads, c.btfOpens, c.note)
		}
	}
	recordOwner := func() int {
		t.Helper()
		fi, err := os.Stat(record)
		if err != nil {
			t.Fatalf("refusal record: %v", err)
		}
		return int(fi.Sys().(*syscall.Stat_t).Uid)
	}

	tried("first capture", traceCapture(t, db, true))
	recordOwner()
	c := traceCapture(t, db, true)
	if c.path != "proc" || c.loads != 0 || c.btfOpens != 0 || !strings.Contains(c.note, "BPF capture not taken: ") ||
		!strings.Contains(c.note, "remembered from") || !strings.Contains(c.note, "tasks iterator") {
		t.Errorf("second capture: path %s, %d bpf() loads, %d opens of the kernel's BTF, note %q: want /proc at once, the refusal said", c.path, c.loads, c.btfOpens, c.note)
	}
	if c.stderr != "" && !strings.HasPrefix(c.stderr, "gpusnap: partial capture") {
		t.Errorf("second capture: stderr %q", c.stderr)
	}
	bootID, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{"boot_id", "kernel_release"} {
		editRecord(t, record, field, "of-an-earlier-boot")
		tried("record of another "+field, traceCapture(t, db, true))
		if data, _ := os.ReadFile(record); !strings.Contains(string(data), strings.TrimSpace(string(bootID))) || strings.Contains(string(data), "of-an-earlier-boot") {
			t.Errorf("record of another %s not replaced: %s", field, data)
		}
	}

	if err := os.Chown(record, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	c = traceCapture(t, db, true)
	tried("record of another user", c)
	if !strings.Contains(c.stderr, "gpusnap: BPF refusal record ignored") || !strings.Contains(c.stderr, "owned by uid 65534") {
		t.Errorf("record of another user: stderr %q, want the record named as ignored", c.stderr)
	}
	if owner := recordOwner(); owner != 0 {
		t.Errorf("the refusal record is still uid %d's after root was refused again", owner)
	}

	// Root with all its capabilities: another caller, whom the record does not bind.
	c = traceCapture(t, db, false)
	if c.loads == 0 || strings.Contains(c.note, "remembered") {
		t.Errorf("root past the record of CAP_BPF alone: path %s, %d bpf() loads, note %q: want BPF tried", c.path, c.loads, c.note)
	}
	if _, err := os.Stat(record); err != nil {
		t.Errorf("root's capture dropped the record of another caller's refusal: %v", err)
	}
	if c = traceCapture(t, db, true); c.loads != 0 || !strings.Contains(c.note, "remembered from") {
		t.Errorf("CAP_BPF alone after root: %d bpf() loads, note %q: want its refusal still remembered", c.loads, c.note)
	}
}

// Before the store's directory exists (a fresh host, --no-store) the refusal
// is remembered in the runtime directory, and the next capture reads /proc
// at once there too; the store, once made, keeps its own record.
func TestLiveRefusalRememberedWithoutStore(t *testing.T) {
	livetest.Require(t, "strace", "setpriv", "unshare")
	tmp := t.TempDir()
	runtimeDir := filepath.Join(tmp, "run")
	if err := os.Mkdir(runtimeDir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("XDG_RUNTIME_DIR", runtimeDir)
	db := filepath.Join(tmp, "no-store-yet", "gpusnap.db")
	if c := traceCapture(t, db, true, "--no-store"); c.path != "proc" || c.loads == 0 {
		t.Fatalf("first capture: path %s, %d bpf() loads: want BPF tried and refused", c.path, c.loads)
	}
	if _, err := os.Stat(filepath.Join(runtimeDir, "gpusnap", "bpf-refusal")); err != nil {
		t.Fatalf("no refusal record in the runtime directory: %v", err)
	}
	if c := traceCapture(t, db, true, "--no-store"); c.path != "proc" || c.loads != 0 || c.btfOpens != 0 || !strings.Contains(c.note, "remembered from") {
		t.Errorf("second capture: path %s, %d bpf() loads, %d opens of the kernel's BTF, note %q: want /proc at once", c.path, c.loads, c.btfOpens, c.note)
	}
}

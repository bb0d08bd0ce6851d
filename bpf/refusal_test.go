package bpf

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gpusnap/gpusnap/internal/testenv"
)

// openWalkEnv makes the test binary load the capture iterators (not pinned)
// and print Refused's verdict on the kernel's answer, then exit
// (TestRefusedByKernel runs it with fewer privileges).
const openWalkEnv = "GPUSNAP_BPF_OPEN_WALK"

func openWalkVerdict() int {
	w, err := OpenWalkWith(TaskPrograms, VMAPrograms)
	if err == nil {
		w.Close()
		fmt.Println("loaded")
		return 0
	}
	fmt.Printf("refused=%v: %v\n", Refused(err), err)
	return 0
}

// The kernel's own refusals of the capture iterators are lasting, wherever
// they fall: a user without CAP_BPF is refused the first map, one with
// CAP_BPF alone (no CAP_PERFMON) the task iterator's programs, after the
// kernel's BTF was read. Root loads them here, or is refused lastingly too
// (the verifier of a kernel without what the programs need).
func TestRefusedByKernel(t *testing.T) {
	testenv.Root(t, "runs processes as another user")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A copy another user can run: the build directory is root's alone.
	dir, err := os.MkdirTemp("", "gpusnap-bpf-refusal-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	copyPath := filepath.Join(dir, "bpf.test")
	if err := os.WriteFile(copyPath, bin, 0o755); err != nil || os.Chmod(dir, 0o755) != nil {
		t.Fatal(err)
	}
	const capBPF = 39
	for _, c := range []struct {
		name string
		attr *syscall.SysProcAttr
		want string // what the refusal names
	}{
		{"root", nil, ""},
		{"nobody", &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}, "maps"},
		{"nobody with CAP_BPF", &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}, AmbientCaps: []uintptr{capBPF}}, "tasks iterator"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(copyPath)
			cmd.Env = append(os.Environ(), openWalkEnv+"=1")
			cmd.SysProcAttr = c.attr
			out, err := cmd.CombinedOutput()
			verdict := strings.TrimSpace(string(out))
			switch {
			case err != nil:
				t.Fatalf("%v: %s", err, out)
			case c.attr == nil && (verdict == "loaded" || strings.HasPrefix(verdict, "refused=true: ")):
			case c.attr == nil:
				t.Errorf("root: %q, want the iterators loaded or refused for good", verdict)
			case !strings.HasPrefix(verdict, "refused=true: ") || !strings.Contains(verdict, c.want):
				t.Errorf("%q, want a lasting refusal of the %s", verdict, c.want)
			}
		})
	}
}

// A shortage that may pass is no refusal, even beside one that lasts; an
// error Refused cannot place is none either: the load is tried again.
func TestRefusedPassing(t *testing.T) {
	eperm := loadError("gpusnap_tasks", fmt.Errorf("load program: %w", syscall.EPERM))
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{eperm, true},
		{fmt.Errorf("load tasks iterator: %w", refusals{eperm, loadError("gpusnap_tasks_proc_exe", syscall.EINVAL)}), true},
		{refusals{eperm, fmt.Errorf("gpusnap_tasks_proc_exe: %w", syscall.ENOMEM)}, false},
		{fmt.Errorf("tasks iterator: %w", syscall.EMFILE), false},
		{loadError("gpusnap_tasks", syscall.EAGAIN), false},
		{errors.New("the capture object has no program gpusnap_tasks"), false},
	} {
		if got := Refused(c.err); got != c.want {
			t.Errorf("Refused(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	if !strings.Contains(eperm.Error(), "operation not permitted") || !errors.Is(eperm, syscall.EPERM) {
		t.Errorf("loadError %q: its line changed, or it no longer wraps the kernel's answer", eperm)
	}
}

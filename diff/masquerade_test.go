package diff

import (
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/snapshot"
)

// TestMasquerade tries the signs, and per-user toolchains that are none.
func TestMasquerade(t *testing.T) {
	for _, c := range []struct {
		comm, exe string
		kthread   bool
		want      string // a substring of the one sign, or "" for none
	}{
		{"python3.11", "/usr/bin/python3.11", false, ""},
		{"python3.11", "/home/ana/.pyenv/versions/3.11.9/bin/python3.11", false, ""},
		{"python", "/home/ana/.conda/envs/t/bin/python3.10", false, ""},
		{"train", "/home/ana/.local/bin/train", false, ""},
		{"python", "/srv/app/.venv/bin/python3", false, ""},
		{"python", "/root/.pyenv/versions/3.12.1/bin/python3.12", false, ""},
		{"miner", "/home/ana/.cache/x/miner", false, "hidden directory /home/ana/.cache"},
		{"miner", "/opt/.pyenv/miner", false, "hidden directory /opt/.pyenv"},
		{"miner", "/home/ana/work/.local/miner", false, "hidden directory /home/ana/work/.local"},
		{"miner", "/tmp/miner", false, "lies under /tmp"},
		{"kworker/u8:3", "/usr/bin/python3.11", false, "named like a kernel thread"},
		{"ksoftirqd/0", "/usr/bin/python3.11", false, "named like a kernel thread"},
		{"kthreadd", "/usr/bin/perl", false, "named like a kernel thread"},
		{"kworker/u8:3", "", true, ""},
		{"kworkers", "/usr/bin/python3", false, ""},
		// A proc root's comm past the kernel's 15 bytes, the whole exe's name.
		{"nvidia-persistenced", "/usr/bin/nvidia-persistenced", false, ""},
	} {
		signs := masquerade(&snapshot.Process{Comm: c.comm, Exe: c.exe, KernelThread: c.kthread})
		switch {
		case c.want == "" && len(signs) > 0:
			t.Errorf("%s %s: %q, want no sign", c.comm, c.exe, signs)
		case c.want != "" && (len(signs) != 1 || !strings.Contains(signs[0], c.want)):
			t.Errorf("%s %s: %q, want one sign with %q", c.comm, c.exe, signs, c.want)
		}
	}
}

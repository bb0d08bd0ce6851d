package snapshot_test

import (
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/snapshot"
)

// TestOwnerRule: an id is vouched for where the capture read its cgroup
// directories and no one but root could write them; where it read nothing
// (an older snapshot, a --proc-root tree), by name alone.
func TestOwnerRule(t *testing.T) {
	id := "4f3c2a1b0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b"
	job := func(facts ...snapshot.OwnerCgroup) *snapshot.Process {
		return &snapshot.Process{SlurmJobID: "777", Cgroups: []string{"0::/system.slice/slurmstepd.scope/job_777/step_0"}, OwnerCgroups: facts}
	}
	read := snapshot.OwnerCgroup{Owner: snapshot.OwnerSlurmJob, Dir: "/system.slice/slurmstepd.scope/job_777"}
	delegated, unread := read, read
	delegated.Delegated = "/system.slice/slurmstepd.scope is owned by uid 1001"
	unread.Unread = "/system.slice: permission denied"
	for _, c := range []struct {
		name  string
		p     *snapshot.Process
		want  string // VerifiedOwner(slurm_job)
		doubt string // in OwnerDoubts
	}{
		{"root's directories", job(read), "777", ""},
		{"a directory a user owns", job(delegated), "", "owned by uid 1001"},
		{"directories not read", job(unread), "", "could not be read: /system.slice: permission denied"},
		{"facts of another id only", job(snapshot.OwnerCgroup{Owner: snapshot.OwnerPod, Dir: "/kubepods.slice/x"}), "", "was not read"},
		{"no facts: by name, a system unit", job(), "777", ""},
		{"no facts: by name, a user manager's subtree",
			&snapshot.Process{ContainerID: id, Cgroups: []string{"0::/user.slice/user-1001.slice/user@1001.service/docker-" + id + ".scope"}}, "", "systemd user manager"},
		{"no facts: v1, the systemd hierarchy",
			&snapshot.Process{SlurmJobID: "777", Cgroups: []string{"12:memory:/", "1:name=systemd:/user.slice/user-1001.slice/user@1001.service/app.slice/x.scope"}}, "", "systemd user manager"},
		{"no id", &snapshot.Process{Cgroups: []string{"0::/system.slice/ssh.service"}}, "", ""},
	} {
		got := c.p.VerifiedOwner(snapshot.OwnerSlurmJob)
		if c.p.ContainerID != "" {
			got = c.p.VerifiedOwner(snapshot.OwnerContainer)
		}
		if got != c.want {
			t.Errorf("%s: VerifiedOwner = %q, want %q", c.name, got, c.want)
		}
		doubts := strings.Join(c.p.OwnerDoubts(), "\n")
		if c.doubt == "" && doubts != "" || !strings.Contains(doubts, c.doubt) {
			t.Errorf("%s: OwnerDoubts = %q, want %q", c.name, doubts, c.doubt)
		}
	}
}

package eventlog_test

import (
	"testing"

	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/snapshot"
)

// TestVerifiedOwner: watch's records are judged by the snapshots' owner
// rule: an id whose cgroup directory a user owns names no one.
func TestVerifiedOwner(t *testing.T) {
	dir := "/system.slice/slurmstepd.scope/job_777"
	p := &eventlog.Process{SlurmJobID: "777", Cgroup: dir + "/step_0",
		OwnerCgroups: []snapshot.OwnerCgroup{{Owner: snapshot.OwnerSlurmJob, Dir: dir}}}
	if got := p.VerifiedOwner(snapshot.OwnerSlurmJob); got != "777" {
		t.Errorf("root's job directory: %q, want 777", got)
	}
	p.OwnerCgroups[0].Delegated = dir + " is owned by uid 1001"
	if got := p.VerifiedOwner(snapshot.OwnerSlurmJob); got != "" {
		t.Errorf("a user's job directory: %q, want none", got)
	}
	old := &eventlog.Process{PodUID: "aa-bb", Cgroup: "/user.slice/user-1001.slice/user@1001.service/kubepods-podaa_bb.slice"}
	if got := old.VerifiedOwner(snapshot.OwnerPod); got != "" {
		t.Errorf("a record without facts, below a user manager: %q, want none", got)
	}
}

package ocsf

import (
	"testing"

	"github.com/gpusnap/gpusnap/diff"
)

// reap's follow-ups of a process's findings are valid Detection Findings with
// the uid of the finding they update: Close and Resolved for an ended
// process, Update and In Progress for one left; no other process's.
func TestFollowupsUpdateTheirFindings(t *testing.T) {
	snap := captureOf(t, gpuhost, h100x8)
	r := diff.Check(snap, diff.CheckOptions{ZombieThreshold: diff.DefaultZombieThreshold})
	src := Source{Host: snap.Host.Hostname, Version: "1.2.3", Command: "reap"}
	opened := map[string]Finding{}
	var miner string
	for i, f := range FromResult(r, src) {
		opened[f.FindingInfo.UID] = f
		if p := r.Findings[i].Process; p != nil && p.PID == 5000 {
			miner = p.Key()
		}
	}
	for _, closed := range []bool{true, false} {
		fs := Followups(r, src, miner, closed, "gpusnap reap: terminate done", fixedTime)
		if len(fs) == 0 {
			t.Fatal("no follow-up of process 5000's findings")
		}
		validateLines(t, render(t, fs))
		for _, f := range fs {
			o, ok := opened[f.FindingInfo.UID]
			want := [4]any{2, "In Progress", 200402, "Update"}
			if closed {
				want = [4]any{4, "Resolved", 200403, "Close"}
			}
			got := [4]any{f.StatusID, f.Status, f.TypeUID, f.ActivityName}
			switch {
			case !ok || f.Evidences[0].Process.PID != 5000:
				t.Errorf("a follow-up of no finding of process 5000: %+v", f)
			case got != want || f.Message != "gpusnap reap: terminate done" || f.FindingInfo.ModifiedTime != fixedTime.UnixMilli():
				t.Errorf("follow-up %v %q %d, want %v", got, f.Message, f.FindingInfo.ModifiedTime, want)
			case o.FindingInfo.CreatedTime != f.FindingInfo.CreatedTime:
				t.Errorf("created_time changed: %d, was %d", f.FindingInfo.CreatedTime, o.FindingInfo.CreatedTime)
			}
		}
	}
}

package ocsf

import (
	"time"

	"github.com/gpusnap/gpusnap/diff"
)

// The activities and statuses of a finding after it was opened say what
// gpusnap reap did about its process.
const (
	activityUpdate   = 2
	activityClose    = 3
	statusInProgress = 2
	statusResolved   = 4
)

// Followups are the findings of r about process (PID@START), each as an
// update of the finding a diff or check opened (the same finding_info.uid).
// When closed, the finding is closed with status Resolved, else updated with
// status In Progress. message says what was done, at at.
func Followups(r *diff.Result, src Source, process string, closed bool, message string, at time.Time) []Finding {
	var out []Finding
	for i, f := range FromResult(r, src) {
		if p := r.Findings[i].Process; p == nil || p.Key() != process {
			continue
		}
		f.ActivityID, f.ActivityName, f.StatusID, f.Status = activityUpdate, "Update", statusInProgress, "In Progress"
		if closed {
			f.ActivityID, f.ActivityName, f.StatusID, f.Status = activityClose, "Close", statusResolved, "Resolved"
		}
		f.TypeUID, f.TypeName = classDetection*100+f.ActivityID, "Detection Finding: "+f.ActivityName
		f.Time, f.Message = at.UnixMilli(), message
		f.FindingInfo.ModifiedTime = f.Time
		out = append(out, f)
	}
	return out
}

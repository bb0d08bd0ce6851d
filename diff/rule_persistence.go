package diff

import (
	"fmt"
	"slices"

	"github.com/gpusnap/gpusnap/provenance"
	"github.com/gpusnap/gpusnap/snapshot"
)

// KindPersistence means something brings a GPU finding's process back after a
// kill, or already has, such as a restarting unit, a timer, cron or atd, the
// same binary under a new process, or a reboot survived.
const KindPersistence = "persistence"

// Persistence runs in Compare after the other rules, on their findings.
var _ = register(&Rule{
	Kind: KindPersistence, Title: "Persistence of a GPU process",
	Severities: []Severity{Medium, High},
	Order:      180,
})

// schedulers are the comms and exe names of the daemons that start jobs on
// a schedule. A GPU user descending from one was started by a crontab or an
// at job, which starts it again.
var schedulers = map[string]bool{"cron": true, "crond": true, "anacron": true, "atd": true}

// persistence raises a finding for each live process behind a GPU finding
// that something starts again. A restarting systemd unit or a timer, descent
// from cron or atd, or a binary that used a GPU under an earlier process (by
// SHA-256, verified packaged ones excepted) all count. It is medium, high
// with the evidence of a suspected_compromise.
func (c *comparison) persistence(findings []Finding) []Finding {
	var out []Finding
	seen := map[string]bool{}
	for _, f := range findings {
		if f.Process == nil || !ruleFor(f.Kind).GPUUse || seen[f.Process.Key()] {
			continue
		}
		seen[f.Process.Key()] = true
		p := c.toByKey[idOf(f.Process.PID, f.Process.StartTime)]
		if p == nil || p.Defunct() {
			continue
		}
		var evidence []string
		for _, s := range persistenceSources(p) {
			evidence = append(evidence, s.why)
		}
		if r := c.restarter(p); r != nil {
			evidence = append(evidence, r.why)
		}
		evidence = append(evidence, c.binaryReturns(p)...)
		if len(evidence) == 0 {
			continue
		}
		ref := processRef(p)
		out = append(out, Finding{
			Kind:     KindPersistence,
			Severity: Medium, // high where triage finds a compromise (attachTriage)
			Summary:  fmt.Sprintf("%s uses a GPU and comes back: %s", describe(ref), evidence[0]),
			Process:  ref,
			Evidence: evidence,
		})
	}
	return out
}

// binaryReturns finds p's binary, by SHA-256, under a GPU-using process of FROM
// or the history that is gone at TO. It gives one line for the first such
// process of this boot (FROM first, then the history in its order), one for the
// first of another boot.
func (c *comparison) binaryReturns(p *snapshot.Process) []string {
	if p.HashStatus != snapshot.HashOK || p.ExeSHA256 == "" || (p.Package != nil && p.Package.Status == provenance.Verified) {
		return nil
	}
	var sameBoot, otherBoot string
	snaps := append([]*snapshot.Snapshot{c.from}, c.opts.History...)
	for _, s := range snaps {
		for i := range s.Processes {
			q := &s.Processes[i]
			// A capture hashes the exe of GPU users alone, so a hash is a GPU user.
			if q.ExeSHA256 != p.ExeSHA256 || q.Key() == p.Key() || c.toByKey[idOf(q.PID, q.StartTime)] != nil {
				continue
			}
			line := fmt.Sprintf("its binary (sha256 %s) used a GPU as pid %d (%s) in snapshot %s", short(p.ExeSHA256), q.PID, q.Comm, s.ID)
			switch {
			case s.Host.BootID != "" && c.to.Host.BootID != "" && s.Host.BootID != c.to.Host.BootID:
				if otherBoot == "" {
					otherBoot = line + ", before a reboot (boot " + s.Host.BootID + "): it survived the reboot"
				}
			case sameBoot == "":
				sameBoot = line + ", which has exited"
			}
		}
	}
	return slices.DeleteFunc([]string{otherBoot, sameBoot}, func(s string) bool { return s == "" })
}

// short is the first 12 hex digits of a digest, as an evidence line names it.
func short(sum string) string {
	if len(sum) > 12 {
		return sum[:12]
	}
	return sum
}

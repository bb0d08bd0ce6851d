package capture

import (
	"errors"
	"strconv"
	"strings"
	"syscall"

	"github.com/gpusnap/gpusnap/snapshot"
)

// readLineage gives each GPU user its ancestry from the snapshot's own
// processes, whether it was reparented (from its and its parent's sessions,
// read again from stat: the BPF path does not carry them), and its wchan
// when in D state.
func (cfg *scanConfig) readLineage(r *reader, s *snapshot.Snapshot, users []*snapshot.Process) {
	byPID := make(map[int]*snapshot.Process, len(s.Processes))
	for i := range s.Processes {
		byPID[s.Processes[i].PID] = &s.Processes[i]
	}
	for _, p := range users {
		p.Ancestry = ancestry(p, byPID)
		sid, ok := cfg.session(r, p.PID, p.StartTime)
		if parent := byPID[p.PPID]; ok && parent != nil && sid != 0 && sid != p.PID {
			psid, ok := cfg.session(r, parent.PID, parent.StartTime)
			p.Reparented = ok && psid != sid
		}
		if p.State == "D" {
			data, err := r.readFileAt(cfg.rootfd, cfg.root, strconv.Itoa(p.PID)+"/wchan", nil)
			switch {
			case err == nil:
				p.Wchan = strings.TrimSpace(string(truncate(data, 128)))
			case !errors.Is(err, syscall.ENOENT):
				p.Errors = append(p.Errors, "wchan: "+errText(err))
			}
		}
	}
}

// ancestry walks p's parents in byPID, nearest first, to PID 1, a parent
// the snapshot lacks, or MaxAncestry.
func ancestry(p *snapshot.Process, byPID map[int]*snapshot.Process) []snapshot.Ancestor {
	var out []snapshot.Ancestor
	seen := map[int]bool{p.PID: true}
	for pid := p.PPID; pid > 0 && len(out) < snapshot.MaxAncestry && !seen[pid]; {
		a := byPID[pid]
		if a == nil {
			break
		}
		seen[pid] = true
		out = append(out, snapshot.Ancestor{PID: a.PID, StartTime: a.StartTime, Comm: a.Comm, Exe: a.Exe})
		pid = a.PPID
	}
	return out
}

// session reads the session ID of process pid, if it is still the process
// that started at start.
func (cfg *scanConfig) session(r *reader, pid int, start uint64) (int, bool) {
	data, err := r.readTaskFileAt(cfg.rootfd, cfg.root, strconv.Itoa(pid)+"/stat", nil)
	if err != nil {
		return 0, false
	}
	st, err := parseStat(data)
	return st.Session, err == nil && st.StartTime == start
}

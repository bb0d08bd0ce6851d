package capture

import (
	"errors"
	"strconv"
	"strings"
	"syscall"

	"github.com/gpusnap/gpusnap/capture/procfs"
	"github.com/gpusnap/gpusnap/snapshot"
)

// readLineage gives each GPU user its ancestry from the snapshot's own
// processes, its and its ancestors' process groups and sessions (read again
// from stat, as the BPF path does not carry them), whether it was reparented
// (its session is not its parent's), and its wchan when in D state.
func (cfg *scanConfig) readLineage(r *procfs.Reader, s *snapshot.Snapshot, users []*snapshot.Process) {
	byPID := make(map[int]*snapshot.Process, len(s.Processes))
	for i := range s.Processes {
		byPID[s.Processes[i].PID] = &s.Processes[i]
	}
	read := map[*snapshot.Process]bool{} // ancestors whose stat was read, and whether it could be
	for _, p := range users {
		p.Ancestry = ancestry(p, byPID)
		ok := cfg.readGroup(r, p)
		for _, a := range p.Ancestry {
			if q := byPID[a.PID]; q != nil {
				if _, done := read[q]; !done {
					read[q] = cfg.readGroup(r, q)
				}
			}
		}
		if parent := byPID[p.PPID]; ok && parent != nil && read[parent] && p.Session != 0 && p.Session != p.PID {
			p.Reparented = parent.Session != p.Session
		}
		if p.State == "D" {
			data, err := r.ReadFileAt(cfg.rootfd, cfg.root, strconv.Itoa(p.PID)+"/wchan", nil)
			switch {
			case err == nil:
				p.Wchan = strings.TrimSpace(string(procfs.Truncate(data, 128)))
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

// readGroup reads p's process group and session from its stat, if p is
// still the process that started at its start time, and says whether it did.
func (cfg *scanConfig) readGroup(r *procfs.Reader, p *snapshot.Process) bool {
	data, err := r.ReadTaskFileAt(cfg.rootfd, cfg.root, strconv.Itoa(p.PID)+"/stat", nil)
	if err != nil {
		return false
	}
	st, err := procfs.ParseStat(data)
	if err != nil || st.StartTime != p.StartTime {
		return false
	}
	p.PGID, p.Session = st.PGID, st.Session
	return true
}

package capture

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gpusnap/gpusnap/capture/procfs"
	"github.com/gpusnap/gpusnap/snapshot"
)

// Bounds of settle. A tenant controls how fast its processes fork and
// exit, so the chase after them is bounded in listings, in children files
// read and in processes read, whatever they do.
const (
	maxRelists   = 8    // listings of the proc root after the first
	maxChildren  = 64   // children files (task/TID/children) read
	maxLateReads = 4096 // processes read after the first pass
	// childrenLimit is the most of one children file read. The rest of a
	// subreaper's children are found by the next listing.
	childrenLimit = 64 << 10
)

// settle rereads, on either capture path, the processes that appeared during
// the first pass, while some process vanished before being read in full. A
// process forking and exiting every few hundred microseconds has a new PID at
// each listing, so each round reads the children of the vanished ones'
// parents, then new PIDs. A bound ends it, named in scan.Unsettled.
func (cfg *scanConfig) settle(ctx context.Context, listed []int, results []result, scan *snapshot.Scan) ([]result, error) {
	if !cfg.live {
		return results, nil // a tree does not change while it is read
	}
	seen := make(map[int]bool, len(results)+len(listed))
	for _, pid := range listed {
		seen[pid] = true
	}
	for i := range results {
		seen[results[i].p.PID] = true
	}
	w := newWorker(cfg)
	reads, childFiles := 0, 0
	read := func(pid int) {
		seen[pid] = true
		reads++
		results = append(results, w.process(pid))
	}
	batch := results
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		lost := 0
		var parents []int
		for i := range batch {
			if batch[i].vanished || batch[i].exiting || batch[i].p.Defunct() {
				lost++
				if ppid := batch[i].p.PPID; ppid > 0 && !slices.Contains(parents, ppid) {
					parents = append(parents, ppid)
				}
			}
		}
		if lost == 0 {
			break
		}
		if scan.Relists == maxRelists || reads >= maxLateReads {
			scan.Unsettled = fmt.Sprintf("%d processes of the last of %d listings vanished before they were read, and the capture stopped at its bound (%d listings, %d late reads): a process that forks and exits faster than it is read may not have been seen",
				lost, scan.Relists+1, maxRelists+1, reads)
			break
		}
		start := len(results)
		for _, ppid := range parents {
			for _, pid := range w.children(ppid, &childFiles) {
				if !seen[pid] && reads < maxLateReads {
					read(pid)
				}
			}
		}
		pids, err := w.r.ListPIDs(cfg.rootfd)
		if err != nil {
			return nil, fmt.Errorf("proc root: %s: %s", cfg.root, errText(err))
		}
		scan.Relists++
		// Newest first, since of the PIDs a fork chain left, the last is the one alive.
		slices.SortFunc(pids, func(a, b int) int { return b - a })
		for _, pid := range pids {
			if !seen[pid] && reads < maxLateReads {
				read(pid)
			}
		}
		batch = results[start:]
	}
	slices.SortFunc(results, func(a, b result) int { return a.p.PID - b.p.PID })
	return results, nil
}

// children lists the children of process pid, from the children file of
// each of its threads (a child belongs to the thread that forked it, or to
// the subreaper thread that inherited it), counting the files read in n and
// reading none past maxChildren. Kernels without CONFIG_PROC_CHILDREN have
// no such file, and the listing alone finds the successor there.
func (w *worker) children(pid int, n *int) []int {
	dir := procfs.PIDDir(w.root, pid)
	taskfd, err := w.r.OpenDirAt(w.rootfd, w.root, strconv.Itoa(pid)+"/task")
	if err != nil {
		return nil
	}
	defer w.r.Close(taskfd, true)
	w.tids, err = w.r.ListInts(taskfd, w.tids[:0], 1, procfs.PIDMax-1)
	if err != nil {
		return nil
	}
	var out []int
	for _, tid := range w.tids {
		if *n >= maxChildren {
			break
		}
		*n++
		name := strconv.Itoa(tid) + "/children"
		fd, err := w.r.OpenRead(taskfd, dir+"/task", name, false)
		if err != nil {
			continue
		}
		data, _, err := w.r.ReadFd(fd, w.small[:0], childrenLimit, false, false)
		w.r.Close(fd, false)
		w.small = data
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(data)) {
			if c, err := strconv.Atoi(f); err == nil && c > 0 && c < procfs.PIDMax {
				out = append(out, c)
			}
		}
	}
	return out
}

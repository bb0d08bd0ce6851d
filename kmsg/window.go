package kmsg

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/gpusnap/gpusnap/snapshot"
)

// Window is the kernel log between two positions. It holds the records with
// a sequence number from From (FROM's Next) up to, not including, To (TO's
// Next), and what of them could not be read.
type Window struct {
	Source  string   `json:"source"`
	BootID  string   `json:"boot_id,omitempty"`
	From    uint64   `json:"from_seq"`
	To      uint64   `json:"to_seq"`
	Records []Record `json:"records"`
	// Missing says, one line each, what of the window was not read, such as
	// records the ring overwrote, another boot or a log that could not be
	// opened. It is empty only when every record of the window was read.
	Missing []string `json:"missing,omitempty"`
}

// ReadWindow reads the records that the log at path gained between two
// snapshots' positions, skipping earlier ones by header and stopping at the
// window's end. What it cannot read is said in Missing, never left out. A
// file is taken as TO's boot's log, and an empty path reads the log TO's
// position came from.
func ReadWindow(path string, from, to *snapshot.KernelLogPosition) *Window {
	if path == "" && to != nil {
		path = to.Source
	}
	w := &Window{Source: path}
	switch {
	case from == nil:
		w.miss("FROM recorded no kernel-log position (taken before gpusnap read the kernel log): the kernel log of the window is not checked")
		return w
	case to == nil:
		w.miss("TO recorded no kernel-log position: the kernel log of the window is not checked")
		return w
	case from.Unavailable != "":
		w.miss("the kernel log was not read at FROM (" + from.Unavailable + "): the kernel log of the window is not checked")
		return w
	case to.Unavailable != "":
		w.miss("the kernel log was not read at TO (" + to.Unavailable + "): the kernel log of the window is not checked")
		return w
	}
	w.BootID, w.From, w.To = to.BootID, from.Next, to.Next
	if from.BootID != to.BootID {
		// The reboot came after FROM, so everything TO's boot logged is in the window.
		w.From = 0
		w.miss(fmt.Sprintf("FROM and TO are in different boots (%s, %s): the records FROM's boot logged after sequence number %d went with it; the window is read from the start of TO's boot",
			from.BootID, to.BootID, from.Next))
	}
	if w.To < w.From {
		w.miss(fmt.Sprintf("TO's kernel-log position (%d) precedes FROM's (%d): the positions are not of one log", w.To, w.From))
		return w
	}
	if w.To == w.From {
		return w
	}
	src, err := open(path)
	if err != nil {
		w.miss("the kernel log could not be read: " + unavailable(err))
		return w
	}
	defer src.close()
	if _, live := src.(*deviceSource); live {
		if now := BootID(); to.BootID != "" && now != to.BootID {
			w.miss(fmt.Sprintf("the host has rebooted since TO (boot %s, now %s): the kernel log of the window went with that boot", to.BootID, now))
			return w
		}
	}
	w.read(src)
	return w
}

// BootID is the running boot's id, from /proc/sys/kernel/random/boot_id, or "" if unreadable.
func BootID() string {
	data, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
}

func (w *Window) miss(line string) { w.Missing = append(w.Missing, line) }

// read keeps the records of the window from src and says which are missing.
func (w *Window) read(src source) {
	want := w.From // the next sequence number the window should hold
	dropped := 0
	n := min(w.To-w.From, MaxWindowRecords)
	w.Records = make([]Record, 0, n)
	var arena textArena
	for {
		first, dict, long, err := src.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			w.miss(fmt.Sprintf("reading the kernel log stopped at sequence number %d: %s", want, err))
			return
		}
		seq, err := parseSeq(first)
		if err != nil || seq < w.From {
			continue
		}
		if seq >= w.To {
			break
		}
		if seq < want {
			continue // a file may repeat a record, which the device never does
		}
		if seq > want {
			w.miss(fmt.Sprintf("records %d to %d were overwritten before they were read (the kernel's ring wrapped)", want, seq-1))
		}
		want = seq + 1
		if len(w.Records) >= MaxWindowRecords {
			dropped++
			continue
		}
		// Each record is parsed in place. w.Records has room for every
		// record of the window, and a record copied in would be copied again.
		w.Records = w.Records[:len(w.Records)+1]
		rec := &w.Records[len(w.Records)-1]
		if err := parse(rec, first, dict, &arena); err != nil {
			*rec, w.Records = Record{}, w.Records[:len(w.Records)-1]
			w.miss(fmt.Sprintf("record %d: %s", seq, err))
			continue
		}
		if long != nil {
			rec.Cut = &Cut{TextLen: long.n, TextSHA256: long.sum}
		}
	}
	if want < w.To {
		w.miss(fmt.Sprintf("records %d to %d of the window are not in the log", want, w.To-1))
	}
	if dropped > 0 {
		w.miss(fmt.Sprintf("%d records of the window past the first %d were not kept", dropped, MaxWindowRecords))
	}
}

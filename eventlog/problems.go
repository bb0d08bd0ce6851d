package eventlog

import (
	"fmt"
	"slices"
	"strings"
)

// The blind spots a watch records that hide no open or mapping a window's
// verdict turns on (docs/diff.md, Coverage). Watch names them with these
// words, and Coverage.Problems leaves them out. Every other blind spot
// recorded by a watch of the window makes the window not covered.
const (
	// BlindBeforeStart is a descriptor that existed before the watch
	// started, which no kernel hook sees, as they see opens and mappings as
	// they happen. A descriptor older than FROM that FROM's capture did not
	// see either is out of reach (docs/threat-model.md).
	BlindBeforeStart = "uses of a device through a descriptor or mapping inherited or received before the watch started"
	// BlindMappingSize says the mapping is seen but its length is not.
	BlindMappingSize = "the size of mappings (security_mmap_file has none)"
	// BlindKernelOpens says the syscall tracepoints do not see the kernel's
	// own opens (firmware, exec). A process cannot map or ioctl a file the
	// kernel opened for itself.
	BlindKernelOpens = "opens by the kernel on a process's behalf"
	// BlindFixedSlot says an io_uring open into a registered slot is seen
	// once it becomes a descriptor, the only way to map or ioctl it. While
	// the process lives, the capture reads the ring's registered files.
	BlindFixedSlot = "io_uring opens into a registered file slot (IORING_OP_OPENAT with a file index): seen only once IORING_OP_FIXED_FD_INSTALL makes one a descriptor"
	// BlindNVMLProcesses, BlindNVMLXid and BlindNVMLEvents start the blind
	// spots of a watch without NVML (or a GPU's events). They hide no use,
	// since a process NVML lists has opened a device node, which the hooks
	// see, and an Xid is in the kernel log.
	BlindNVMLProcesses = "GPU processes NVML lists"
	BlindNVMLXid       = "Xid and ECC events from NVML"
	BlindNVMLEvents    = "NVML events of "
)

// hidesUses reports whether a blind spot may hide an open or mapping of a
// device, as every one does but those the constants above name.
func hidesUses(spot string) bool {
	return spot != BlindBeforeStart && spot != BlindMappingSize && spot != BlindKernelOpens && spot != BlindFixedSlot &&
		!strings.HasPrefix(spot, BlindNVMLProcesses) && !strings.HasPrefix(spot, BlindNVMLXid) && !strings.HasPrefix(spot, BlindNVMLEvents)
}

// The kinds of Problem.
const (
	ProblemGap       = "gap"       // no watch recorded a span of the window
	ProblemLost      = "lost"      // the kernel dropped events
	ProblemDamaged   = "damaged"   // lines of the log that are not events
	ProblemBroken    = "broken"    // records that break their segment's hash chain (removed, edited, re-timed)
	ProblemBlind     = "blind"     // a watch of the window ran in a mode that cannot see some opens or mappings
	ProblemUnflushed = "unflushed" // the log holds no record at or after TO's capture start
	ProblemNoLog     = "no_log"    // the log is missing or cannot be read
)

// Problem is one reason the log does not cover a window whole, something a
// watch should have recorded and may not have. A reader of Coverage takes
// every Problem as one, whatever its Kind, so a new kind needs no reader
// changed.
type Problem struct {
	Kind string `json:"kind"`
	Text string `json:"text"` // one line, in words
}

// Problems lists every reason the coverage is not whole. It lists none for
// a window a watch recorded completely in a mode that sees every open and
// mapping.
func (c Coverage) Problems() []Problem {
	var out []Problem
	for _, g := range c.Gaps {
		out = append(out, Problem{ProblemGap, "no gpusnap watch recorded from " + g.String()})
	}
	if c.Lost > 0 {
		out = append(out, Problem{ProblemLost, fmt.Sprintf("the kernel dropped %d watch events in the window", c.Lost)})
	}
	if c.Damaged > 0 {
		out = append(out, Problem{ProblemDamaged, fmt.Sprintf("%d lines of the event log are not events (damaged, or torn by a watch that died mid-write)", c.Damaged)})
	}
	if c.Broken > 0 {
		out = append(out, Problem{ProblemBroken, fmt.Sprintf("%d records of the event log break their segment's chain (a record removed, edited or re-timed)", c.Broken)})
	}
	for _, f := range c.Faults {
		out = append(out, Problem{ProblemBroken, "the event log's " + f.String()})
	}
	if slices.Contains(c.Modes, ModeFallback) {
		out = append(out, Problem{ProblemBlind, "a watch of the window ran in its fallback mode (a /proc rescan each interval, no kernel hooks): a process that used a GPU for less than an interval may not be known"})
	}
	for _, b := range c.Blind {
		out = append(out, Problem{ProblemBlind, "a watch of the window cannot see " + b})
	}
	return append(out, c.Other...)
}

// addBlind records the blind spots of a watch of the window that may hide
// an open or mapping, each once.
func (c *Coverage) addBlind(spots []string) {
	for _, b := range spots {
		if hidesUses(b) && !slices.Contains(c.Blind, b) {
			c.Blind = append(c.Blind, b)
		}
	}
}

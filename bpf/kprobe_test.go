package bpf

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/internal/testwait"
)

// TestKprobeMatchesTracepoint runs the kprobe and the tracepoint hooks side
// by side (two loads, each with its own maps and ring buffer) while
// short-lived processes open a node named nvidia0 read-write, map it shared
// and exit: both must report, for every one of them, the same opens,
// mappings and exit, field for field, but what only the syscalls carry (the
// descriptor, the mapping's length) and the f_mode bits of an open that the
// kernel sets after the security hook (the access bits, FMODE_READ and
// FMODE_WRITE, are set before it and compared).
func TestKprobeMatchesTracepoint(t *testing.T) {
	n := 50
	if os.Getenv(matrixEnv) != "" {
		n = 300
	}
	kp, tp := openWatch(t, HookKprobe), openWatch(t, HookTracepoint)
	node := fakeNode(t, "nvidia0")
	kpc, tpc := collectEvents(kp), collectEvents(tp)
	pids := runDeviceUsers(t, node, n)
	users := map[uint32]bool{}
	for _, pid := range pids {
		users[uint32(pid)] = true
	}
	// Each user's exit is its last event: wait for both hooks to have them all.
	// On timeout the counts below say what each hook lacks.
	_ = testwait.For(30*time.Second, "both hooks to report every user's exit", func() bool { return kpc.exited(users) && tpc.exited(users) })
	kp.Close()
	tp.Close()
	got, want := kpc.wait(users), tpc.wait(users)
	if len(want) != 3*n {
		t.Errorf("tracepoint: %d events of %d users, want %d (an open, a mapping, an exit each)", len(want), n, 3*n)
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if got[k] != want[k] {
			t.Errorf("tracepoint reported %q %d times, kprobe %d", k, want[k], got[k])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if want[k] == 0 {
			t.Errorf("kprobe reported %q, tracepoint did not", k)
		}
	}
	t.Logf("kprobe and tracepoint: %d events each of %d short-lived device users", len(got), n)
}

// fmodeReadWrite is FMODE_READ | FMODE_WRITE (include/linux/fs.h).
const fmodeReadWrite = 0x3

// eventCollector keeps what a watch reports, until it is closed.
type eventCollector struct {
	mu     sync.Mutex
	events []Event
	done   chan struct{}
}

func collectEvents(w *Watch) *eventCollector {
	c := &eventCollector{done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for {
			e, err := w.Read()
			if err != nil {
				return
			}
			c.mu.Lock()
			c.events = append(c.events, e)
			c.mu.Unlock()
		}
	}()
	return c
}

// exited says whether every one of users has its exit reported.
func (c *eventCollector) exited(users map[uint32]bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, e := range c.events {
		if e.Kind == KindExit && users[e.PID] {
			n++
		}
	}
	return n == len(users)
}

// wait waits for the watch to be closed and counts the events of users by
// what both hooks report of them.
func (c *eventCollector) wait(users map[uint32]bool) map[string]int {
	<-c.done
	counts := map[string]int{}
	for _, e := range c.events {
		if !users[e.PID] {
			continue
		}
		prot := e.Prot
		if e.Kind == KindOpen {
			prot &= fmodeReadWrite
		}
		k := fmt.Sprintf("kind %d pid %d@%d tid %d ppid %d uid %d comm %s dev %d:%d mode %o flags %#x prot %#x path %s exe %s",
			e.Kind, e.PID, e.StartNS, e.TID, e.PPID, e.UID, e.Comm, e.Major, e.Minor, e.Mode, e.Flags, prot, e.Path, e.Exe)
		counts[k]++
	}
	return counts
}

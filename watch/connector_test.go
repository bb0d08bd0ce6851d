package watch

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/internal/livetest"
	"golang.org/x/sys/unix"
)

// connectorMessage is one datagram of the proc connector as the kernel
// sends it: the netlink header, the cn_msg, a proc_event of what on cpu
// numbered seq, and its event_data words (the union is 24 bytes, its
// largest member's, whatever the event).
func connectorMessage(what, cpu, seq, ack uint32, data ...uint32) []byte {
	ne := binary.NativeEndian
	ev := make([]byte, procEventData+24)
	ne.PutUint32(ev[0:], what)
	ne.PutUint32(ev[4:], cpu)
	for i, d := range data {
		ne.PutUint32(ev[procEventData+4*i:], d)
	}
	cn := make([]byte, cnMsgLen, cnMsgLen+len(ev))
	ne.PutUint32(cn[0:], cnIdxProc)
	ne.PutUint32(cn[4:], cnValProc)
	ne.PutUint32(cn[8:], seq)
	ne.PutUint32(cn[12:], ack)
	ne.PutUint16(cn[16:], uint16(len(ev)))
	cn = append(cn, ev...)
	b := make([]byte, unix.SizeofNlMsghdr, unix.SizeofNlMsghdr+len(cn))
	ne.PutUint32(b[0:], uint32(unix.SizeofNlMsghdr+len(cn)))
	ne.PutUint16(b[4:], unix.NLMSG_DONE)
	return append(b, cn...)
}

func TestParseProcEvents(t *testing.T) {
	cases := []struct {
		name string
		msg  []byte
		want procEvent
	}{
		{"fork", connectorMessage(procEventFork, 1, 7, 0, 100, 100, 101, 101), procEvent{what: procEventFork, cpu: 1, seq: 7, pid: 101, tgid: 101}},
		{"thread", connectorMessage(procEventFork, 0, 8, 0, 100, 100, 102, 100), procEvent{what: procEventFork, seq: 8, pid: 102, tgid: 100}},
		{"exec", connectorMessage(procEventExec, 0, 9, 0, 101, 101), procEvent{what: procEventExec, seq: 9, pid: 101, tgid: 101}},
		{"exit", connectorMessage(procEventExit, 1, 10, 0, 101, 101, 0, 17, 100, 100), procEvent{what: procEventExit, cpu: 1, seq: 10, pid: 101, tgid: 101}},
		{"ack", connectorMessage(procEventNone, 0, 11, 43, 1), procEvent{what: procEventNone, seq: 11, ack: 43, err: 1}},
	}
	for _, c := range cases {
		got := parseProcEvents(c.msg)
		if len(got) != 1 || got[0] != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
	other := connectorMessage(procEventExec, 0, 1, 0, 5, 5)
	binary.NativeEndian.PutUint32(other[unix.SizeofNlMsghdr:], 2) // another connector's index
	if got := parseProcEvents(slices.Concat(other, connectorMessage(procEventExec, 0, 1, 0, 5, 5)[:30])); len(got) != 0 {
		t.Errorf("another connector's message, and a cut one: %+v", got)
	}
}

// TestSequenceSkipped: a message is lost where a CPU's numbers skip one;
// each CPU's first number starts its count, which wraps; old kernels' acks
// (CPU -1) are not counted.
func TestSequenceSkipped(t *testing.T) {
	s := sequence{}
	steps := []struct {
		cpu, seq, want uint32
	}{{0, 100, 0}, {0, 101, 0}, {1, 7, 0}, {0, 104, 2}, {1, 8, 0}, {^uint32(0), 3, 0}, {1, 9, 0}, {1, 2, 1}, {2, ^uint32(0), 0}, {2, 0, 0}}
	for i, st := range steps {
		if got := s.skipped(procEvent{cpu: st.cpu, seq: st.seq}); got != st.want {
			t.Errorf("step %d (cpu %d, seq %d): %d skipped, want %d", i, st.cpu, st.seq, got, st.want)
		}
	}
}

func TestFallbackBlindSaysItsSweep(t *testing.T) {
	heard := strings.Join(fallbackBlind(nil), "\n")
	if !strings.Contains(heard, "within 600 intervals") || strings.Contains(heard, "exits between rescans") {
		t.Errorf("the connector heard:\n%s", heard)
	}
	deaf := strings.Join(fallbackBlind(unix.EPERM), "\n")
	if !strings.Contains(deaf, "within 60 intervals") || !strings.Contains(deaf, "exits between rescans ("+unix.EPERM.Error()) {
		t.Errorf("the connector refused:\n%s", deaf)
	}
}

// TestLiveConnectorHearsExec subscribes as watch does: the kernel takes
// the listen, and the exec of a process started after is heard, by its
// host PID.
func TestLiveConnectorHearsExec(t *testing.T) {
	livetest.Require(t)
	// The connector carries every fork and exit on the host, and another
	// package's hopper forks thousands a second, enough to overrun the
	// socket and drop the one exec this test waits for.
	livetest.ShareQuietHost(t)
	c, err := openConnector()
	if err != nil {
		t.Fatalf("proc connector: %v", err)
	}
	execs := make(chan int, 1<<16)
	done := make(chan error, 1)
	go func() {
		done <- c.read(func(e procEvent) {
			if e.what == procEventExec {
				execs <- e.tgid
			}
		}, func(why string) { t.Logf("loss: %s", why) })
	}()
	defer func() {
		c.close()
		<-done
	}()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	limit := time.After(20 * time.Second)
	for {
		select {
		case pid := <-execs:
			if pid == cmd.Process.Pid {
				return
			}
		case <-limit:
			t.Fatalf("no exec of pid %d heard in 20 s", cmd.Process.Pid)
		}
	}
}

// The proc connector names this pid namespace's processes: a fallback over
// any other proc root (a fixture, another namespace's procfs) does not
// listen to it, and so keeps listing its root every interval.
func TestOwnProc(t *testing.T) {
	if err := ownProc("/proc"); err != nil {
		t.Errorf("/proc: %v", err)
	}
	other := t.TempDir()
	if err := os.Symlink("1", filepath.Join(other, "self")); err != nil {
		t.Fatal(err)
	}
	for _, root := range []string{t.TempDir(), other} {
		if err := ownProc(root); err == nil {
			t.Errorf("%s: taken for this namespace's /proc", root)
		}
	}
}

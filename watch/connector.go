package watch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The proc connector (netlink NETLINK_CONNECTOR, group CN_IDX_PROC) reports
// every fork, exec and exit of the host, by host PID, whatever pid namespace
// the process is in (<linux/cn_proc.h>). The kernel numbers its messages per
// CPU and hands every listener every one, so a number skipped is a message
// lost.

const (
	cnIdxProc         = 1
	cnValProc         = 1
	procCnMcastListen = 1
	procCnMcastIgnore = 2
	procEventNone     = 0 // the kernel's answer to a listen
	procEventFork     = 1
	procEventExec     = 2
	procEventExit     = 0x80000000
	cnMsgLen          = 20 // struct cn_msg without its data
	procEventData     = 16 // the offset of event_data in struct proc_event
	// connectorBuffer is the socket's receive buffer. It holds a few
	// thousand events between two reads before the kernel drops any
	// (ENOBUFS).
	connectorBuffer = 4 << 20
	// ackWait bounds the wait for the kernel's answer to the listen. The
	// kernel answers at once where it takes the listen, and never where it
	// ignores it.
	ackWait = 2 * time.Second
)

// procEvent is one message of the proc connector.
type procEvent struct {
	what, cpu, seq uint32
	// pid and tgid are the thread and process it names, the child's for a
	// fork and the process's own for an exec or exit.
	pid, tgid int
	ack, err  uint32 // the listen's ack number + 1 and its errno, on a procEventNone
}

// parseProcEvents reads the proc connector's messages in one datagram.
// Messages of other connectors, or too short, are left out.
func parseProcEvents(b []byte) []procEvent {
	msgs, err := syscall.ParseNetlinkMessage(b)
	if err != nil {
		return nil
	}
	var out []procEvent
	for _, m := range msgs {
		d := m.Data
		ne := binary.NativeEndian
		if m.Header.Type != unix.NLMSG_DONE || len(d) < cnMsgLen+procEventData+8 ||
			ne.Uint32(d[0:]) != cnIdxProc || ne.Uint32(d[4:]) != cnValProc {
			continue
		}
		ev := d[cnMsgLen:]
		e := procEvent{what: ne.Uint32(ev[0:]), cpu: ne.Uint32(ev[4:]), seq: ne.Uint32(d[8:])}
		data := ev[procEventData:]
		switch {
		case e.what == procEventNone:
			e.ack, e.err = ne.Uint32(d[12:]), ne.Uint32(data[0:])
		case e.what == procEventFork && len(data) >= 16:
			e.pid, e.tgid = int(ne.Uint32(data[8:])), int(ne.Uint32(data[12:]))
		default:
			e.pid, e.tgid = int(ne.Uint32(data[0:])), int(ne.Uint32(data[4:]))
		}
		out = append(out, e)
	}
	return out
}

// sequence follows each CPU's message numbers.
type sequence map[uint32]uint32

// skipped returns how many messages of e's CPU went missing before e. Older
// kernels answer a listen with CPU -1 and the listen's own number, outside
// the count, and such a message is not followed.
func (s sequence) skipped(e procEvent) uint32 {
	if e.cpu == ^uint32(0) {
		return 0
	}
	last, ok := s[e.cpu]
	s[e.cpu] = e.seq
	switch {
	case !ok || e.seq == last+1:
		return 0
	case e.seq > last:
		return e.seq - last - 1
	}
	return 1 // numbered backwards, so the count was reset and at least one is lost
}

// connector is a subscription to the proc connector.
type connector struct {
	f   *os.File
	rc  syscall.RawConn
	buf []byte
	seq sequence
}

// openConnector subscribes and waits for the kernel to take the listen. The
// kernel ignores a listen from outside its initial pid and user namespaces
// and has no connector in other network namespaces, and those are errors
// too.
func openConnector() (*connector, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.NETLINK_CONNECTOR)
	if err != nil {
		return nil, err
	}
	c := &connector{f: os.NewFile(uintptr(fd), "proc connector"), buf: make([]byte, 1<<16), seq: sequence{}}
	if c.rc, err = c.f.SyscallConn(); err == nil {
		err = c.subscribe(fd)
	}
	if err != nil {
		c.f.Close()
		return nil, err
	}
	return c, nil
}

func (c *connector) subscribe(fd int) error {
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: cnIdxProc}); err != nil {
		return err
	}
	// Root may pass rmem_max. Without the privilege the kernel's cap holds.
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, connectorBuffer) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, connectorBuffer)
	}
	// Every listener gets every answer, and the nonce tells ours.
	nonce := uint32(time.Now().UnixNano())
	if err := unix.Sendto(fd, mcastMessage(procCnMcastListen, nonce), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	if err := c.f.SetReadDeadline(time.Now().Add(ackWait)); err != nil {
		return err
	}
	for {
		events, err := c.receive()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return errors.New("the kernel did not answer the listen (a pid or user namespace other than the host's)")
		} else if err != nil && !errors.Is(err, unix.ENOBUFS) {
			return err
		}
		for _, e := range events {
			if e.what == procEventNone && e.ack == nonce+1 {
				if e.err != 0 {
					return fmt.Errorf("the kernel refused the listen: %w", unix.Errno(e.err))
				}
				return c.f.SetReadDeadline(time.Time{})
			}
		}
	}
}

// mcastMessage is a listen (op procCnMcastListen) or its end
// (procCnMcastIgnore). The listen is the one of before Linux 6.6, for every
// event. It filters none out, so every message numbered reaches us.
func mcastMessage(op, nonce uint32) []byte {
	const size = unix.SizeofNlMsghdr + cnMsgLen + 4
	b := make([]byte, size)
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], size)
	ne.PutUint16(b[4:], unix.NLMSG_DONE)
	ne.PutUint32(b[12:], uint32(os.Getpid()))
	m := b[unix.SizeofNlMsghdr:]
	ne.PutUint32(m[0:], cnIdxProc)
	ne.PutUint32(m[4:], cnValProc)
	ne.PutUint32(m[8:], nonce)
	ne.PutUint32(m[12:], nonce)
	ne.PutUint16(m[16:], 4)
	ne.PutUint32(m[cnMsgLen:], op)
	return b
}

// receive reads one datagram. Only the kernel (port 0) can send to the group
// without CAP_NET_ADMIN, and anything else is dropped.
func (c *connector) receive() ([]procEvent, error) {
	var n int
	var from unix.Sockaddr
	var rerr error
	err := c.rc.Read(func(fd uintptr) bool {
		n, from, rerr = unix.Recvfrom(int(fd), c.buf, 0)
		return rerr != unix.EAGAIN
	})
	if err != nil {
		return nil, err
	}
	if rerr != nil {
		return nil, rerr
	}
	if sa, ok := from.(*unix.SockaddrNetlink); !ok || sa.Pid != 0 {
		return nil, nil
	}
	return parseProcEvents(c.buf[:n]), nil
}

// read hands each event to note and each loss to lost until the connector
// fails or is closed, which it returns. A loss is the socket overflowing
// (ENOBUFS) or messages missing from a CPU's count.
func (c *connector) read(note func(procEvent), lost func(string)) error {
	for {
		events, err := c.receive()
		if errors.Is(err, unix.ENOBUFS) {
			lost("its socket overflowed (ENOBUFS)")
			continue
		}
		if err != nil {
			return err
		}
		for _, e := range events {
			if n := c.seq.skipped(e); n > 0 {
				lost(fmt.Sprintf("%d messages of CPU %d missing", n, e.cpu))
			}
			note(e)
		}
	}
}

func (c *connector) close() error {
	// Before Linux 6.6 the kernel counts listens, not sockets. Without the
	// ignore it goes on making every event for no one.
	_ = c.rc.Write(func(fd uintptr) bool {
		_ = unix.Sendto(int(fd), mcastMessage(procCnMcastIgnore, 0), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
		return true
	})
	return c.f.Close()
}

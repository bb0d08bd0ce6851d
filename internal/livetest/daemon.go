package livetest

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/internal/testwait"
)

// Daemon is a server a test started (node_exporter, Prometheus ...), with
// its process and what it wrote on stdout and stderr, for the test's log.
type Daemon struct {
	Name string
	cmd  *exec.Cmd
	out  *LockedBuffer
	done chan struct{}
}

// StartDaemon starts bin with args and registers a Cleanup that stops it by
// its PID, with SIGTERM, then SIGKILL if it has not exited within waitLimit.
// The test fails at cleanup if it did not stop, and its output is logged
// then when the test failed.
func StartDaemon(t testing.TB, bin string, args ...string) *Daemon {
	t.Helper()
	d := &Daemon{Name: bin, cmd: exec.Command(bin, args...), out: &LockedBuffer{}, done: make(chan struct{})}
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("livetest: start %s: %v", bin, err)
	}
	go func() { d.cmd.Wait(); close(d.done) }()
	t.Cleanup(func() {
		if err := d.stop(); err != nil {
			t.Errorf("livetest: %v", err)
		}
		if t.Failed() {
			t.Logf("%s (pid %d) said:\n%s", bin, d.cmd.Process.Pid, d.out.String())
		}
	})
	return d
}

// PID is the daemon's process id.
func (d *Daemon) PID() int { return d.cmd.Process.Pid }

// Exited reports whether the daemon has exited.
func (d *Daemon) Exited() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

func (d *Daemon) stop() error {
	if d.Exited() {
		return nil
	}
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stop %s (pid %d): %w", d.Name, d.cmd.Process.Pid, err)
	}
	select {
	case <-d.done:
		return nil
	case <-time.After(waitLimit):
	}
	d.cmd.Process.Kill()
	<-d.done
	return fmt.Errorf("%s (pid %d) ignored SIGTERM for %s: killed", d.Name, d.cmd.Process.Pid, waitLimit)
}

// WaitHTTP waits until url answers 200, or the daemon exits, or waitLimit
// passes (then the test fails with the daemon's output).
func (d *Daemon) WaitHTTP(t testing.TB, url string) {
	t.Helper()
	client := http.Client{Timeout: 2 * time.Second}
	var last error
	answered := func() bool {
		res, err := client.Get(url)
		if last = err; err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return true
			}
			last = fmt.Errorf("status %s", res.Status)
		}
		return false
	}
	ok := false
	err := testwait.For(waitLimit, d.Name+" to answer "+url, func() bool { ok = answered(); return ok || d.Exited() })
	if !ok {
		t.Fatalf("livetest: %s did not answer %s (%v, last error %v); it said:\n%s", d.Name, url, err, last, d.out.String())
	}
}

// LoopbackAddr is a free TCP address on 127.0.0.1 for a daemon to listen on.
// The kernel picks the port, which is closed again for the daemon to take.
func LoopbackAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skipf("livetest: no loopback TCP here: %v", err)
	}
	defer l.Close()
	return "127.0.0.1:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// LockedBuffer is a bytes.Buffer that writers (a daemon's two output pipes,
// a running command's stderr) fill while a test reads it.
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

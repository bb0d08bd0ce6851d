package main

import (
	"bufio"
	"bytes"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/internal/livetest"
	"github.com/gpusnap/gpusnap/internal/testwait"
)

// vmRSS is a process's resident memory in bytes (VmRSS of its status).
func vmRSS(t *testing.T, pid int) int64 {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// buildGpusnap builds the command into a temporary directory.
func buildGpusnap(t *testing.T) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = "/usr/local/go/bin/go" // where .ci/run finds the toolchain when PATH lacks it
	}
	bin := filepath.Join(t.TempDir(), "gpusnap")
	if out, err := exec.Command(gobin, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestLiveWatchMetricsFlood floods the metrics server of a running watch
// from loopback as any local user could: 5,000 keep-alive connections left
// idle after a request, and 300 that send a 900 KiB header. The watch's
// resident memory must stay within 48 MiB of what it was before, the watch
// must keep running, and once the flood ends a scrape is answered again.
func TestLiveWatchMetricsFlood(t *testing.T) {
	livetest.Require(t)
	bin := buildGpusnap(t)
	addr := livetest.LoopbackAddr(t)
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	d := livetest.StartDaemon(t, bin, "watch", "--listen", addr, "--mode", "fallback", "--no-nvml", "--db", db)
	url := "http://" + addr + "/metrics"
	d.WaitHTTP(t, url)
	before := vmRSS(t, d.PID())

	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	dial := func(send []byte) {
		defer wg.Done()
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			return // past the kernel's accept queue: refused, which is the point
		}
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
		c.SetWriteDeadline(time.Now().Add(3 * time.Second))
		c.Write(send)
	}
	idle := []byte("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
	big := append([]byte("GET /metrics HTTP/1.1\r\nHost: x\r\nX-Pad: "), bytes.Repeat([]byte("a"), 900<<10)...)
	for i := range 5300 {
		wg.Add(1)
		send := idle
		if i%18 == 0 {
			send = big
		}
		go dial(send)
	}
	peak := before
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for end := time.Now().Add(8 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) { // workload: RSS sampled through the flood
		peak = max(peak, vmRSS(t, d.PID()))
	}
	<-done
	mu.Lock()
	held := len(conns)
	for _, c := range conns {
		c.Close()
	}
	mu.Unlock()
	t.Logf("watch RSS %.1f MiB before, %.1f MiB at the peak of a flood of %d connections", float64(before)/(1<<20), float64(peak)/(1<<20), held)
	if d.Exited() {
		t.Fatal("the watch died under the flood")
	}
	if peak-before > 48<<20 {
		t.Errorf("the flood grew the watch by %.1f MiB (limit 48)", float64(peak-before)/(1<<20))
	}
	// The flood's connections are closed: a scrape is answered again.
	var err error
	testwait.Until(t, 30*time.Second, "a scrape answered after the flood's end", func() bool {
		var res *http.Response
		if res, err = (&http.Client{Timeout: 2 * time.Second}).Get(url); err != nil {
			return false
		}
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		found := false
		for sc.Scan() {
			found = found || strings.HasPrefix(sc.Text(), "gpusnap_watch_events_total")
		}
		return res.StatusCode == http.StatusOK && found
	})
}

package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"golang.org/x/sys/unix"

	"github.com/gpusnap/gpusnap/internal/livetest"
	"github.com/gpusnap/gpusnap/internal/testwait"
)

// nriRuntime is NRI's runtime side as containerd embeds it, on a socket of
// the test's, with the pods the "runtime" runs for Synchronize.
type nriRuntime struct {
	t    *testing.T
	rt   *adaptation.Adaptation
	mu   sync.Mutex
	pods []*adaptation.PodSandbox
}

func startNRIRuntime(t *testing.T, dir string) *nriRuntime {
	r := &nriRuntime{t: t}
	sync := func(ctx context.Context, cb adaptation.SyncCB) error {
		r.mu.Lock()
		pods := slices.Clone(r.pods)
		r.mu.Unlock()
		_, err := cb(ctx, pods, nil)
		return err
	}
	update := func(context.Context, []*adaptation.ContainerUpdate) ([]*adaptation.ContainerUpdate, error) {
		return nil, nil
	}
	for _, d := range []string{"plugins", "conf"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	// containerd's plugin_request_timeout: a capture of a loaded host under
	// the race detector takes more than NRI's default 2 s, and more than 10 s
	// where go test runs the other packages' live tests beside it.
	adaptation.SetPluginRequestTimeout(30 * time.Second)
	t.Cleanup(func() { adaptation.SetPluginRequestTimeout(adaptation.DefaultPluginRequestTimeout) })
	rt, err := adaptation.New("containerd", "v1.7-test", sync, update, adaptation.WithSocketPath(filepath.Join(dir, "nri.sock")),
		adaptation.WithPluginPath(filepath.Join(dir, "plugins")), adaptation.WithPluginConfigPath(filepath.Join(dir, "conf")))
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Stop)
	r.rt = rt
	return r
}

// noErr fails the test at once on err.
func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func pod(uid, name string) *adaptation.PodSandbox {
	return &adaptation.PodSandbox{Id: "sandbox-" + uid[:8], Uid: uid, Name: name, Namespace: "ml"}
}

// gpuContainer is a container given GPU minor n as the NVIDIA device plugin gives it: its device node.
func gpuContainer(p *adaptation.PodSandbox, n int) *adaptation.Container {
	return &adaptation.Container{Id: fmt.Sprintf("ctr-%s-%d", p.Id, n), PodSandboxId: p.Id, Name: "worker",
		Linux: &adaptation.LinuxContainer{Devices: []*adaptation.LinuxDevice{{Path: fmt.Sprintf("/dev/nvidia%d", n), Type: "c", Major: 195, Minor: int64(n)}}}}
}

// run, create and stop hold off plugin syncs as containerd does around each
// request: a request made while a plugin registers waits for it, and so
// reaches it.
func (r *nriRuntime) run(p *adaptation.PodSandbox) {
	r.t.Helper()
	if err := r.tryRun(p); err != nil {
		r.t.Fatalf("RunPodSandbox %s: %v", p.Uid, err)
	}
}

// tryRun is run that returns the refusal: a pod refused is not running.
func (r *nriRuntime) tryRun(p *adaptation.PodSandbox) error {
	defer r.rt.BlockPluginSync().Unblock()
	if err := r.rt.RunPodSandbox(context.Background(), &adaptation.RunPodSandboxRequest{Pod: p}); err != nil {
		return err
	}
	r.mu.Lock()
	r.pods = append(r.pods, p)
	r.mu.Unlock()
	return nil
}

func (r *nriRuntime) create(p *adaptation.PodSandbox, c *adaptation.Container) error {
	defer r.rt.BlockPluginSync().Unblock()
	_, err := r.rt.CreateContainer(context.Background(), &adaptation.CreateContainerRequest{Pod: p, Container: c})
	return err
}

func (r *nriRuntime) stop(p *adaptation.PodSandbox) {
	r.t.Helper()
	defer r.rt.BlockPluginSync().Unblock()
	if err := r.rt.StopPodSandbox(context.Background(), &adaptation.StopPodSandboxRequest{Pod: p}); err != nil {
		r.t.Fatalf("StopPodSandbox %s: %v", p.Uid, err)
	}
}

// syslogSink is a unixgram socket that keeps what is sent to it.
func syslogSink(t *testing.T, path string) *livetest.LockedBuffer {
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	var got livetest.LockedBuffer
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			got.Write(append(buf[:n:n], '\n'))
		}
	}()
	return &got
}

// waitUntil polls cond for up to a minute; on timeout the test fails with
// out, what the plugin said.
func waitUntil(t *testing.T, what string, out func() string, cond func() bool) {
	t.Helper()
	if err := testwait.For(time.Minute, what, cond); err != nil {
		t.Fatalf("%v:\n%s", err, out())
	}
}

// fakeGPUNode makes fake GPUs of the given minors (loop devices named
// nvidiaN in DIR/dev, DIR under /run) held by a daemon, as
// nvidia-persistenced holds a host's GPUs, and an allow list (DIR/allow)
// of that daemon and of other tests' ghosts. It returns DIR, the nodes and
// the allow list.
func fakeGPUNode(t *testing.T, prefix string, minors ...int) (dir string, nodes []string, allow string) {
	t.Helper()
	// Outside /tmp: other packages' live tests leave ghosts of their own on
	// nvidia0 nodes under /tmp; the allow list takes those out of verdicts.
	// A hidden process of unknown start time no entry may allow, and a
	// hopper fails a capture. The quiet host keeps both away from the
	// plugin's checks and diffs.
	livetest.ShareQuietHost(t)
	livetest.OwnFakeGPUs(t)
	dir, err := os.MkdirTemp("/run", prefix)
	if err != nil {
		t.Skipf("NRI live test: no directory under /run: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	noErr(t, os.Mkdir(filepath.Join(dir, "dev"), 0o755))
	// Other tests' fake GPUs are nvidia0 and nvidia1.
	for _, i := range minors {
		l := livetest.NewLoop(t)
		node := filepath.Join(dir, "dev", fmt.Sprintf("nvidia%d", i))
		noErr(t, syscall.Mknod(node, syscall.S_IFBLK|0o666, int(l.Major)<<8|int(l.Minor&0xff)|int(l.Minor&^0xff)<<12))
		nodes = append(nodes, node)
	}
	// A daemon holds every node, as nvidia-persistenced holds a host's GPUs:
	// a check sees a GPU through its node, and without NVML nothing else
	// shows these GPUs (an unseen GPU is never clean).
	var held []*os.File
	for _, node := range nodes {
		f, err := os.Open(node)
		noErr(t, err)
		held = append(held, f)
	}
	daemon := exec.Command("sleep", "3600")
	daemon.ExtraFiles = held
	noErr(t, daemon.Start())
	t.Cleanup(func() { _ = daemon.Process.Kill(); _ = daemon.Wait() })
	for _, f := range held {
		f.Close()
	}
	allow = filepath.Join(dir, "allow")
	noErr(t, os.WriteFile(allow, []byte("# other tests' ghosts, containers, hidden and unreadable processes, and the daemon holding the fake GPUs\n"+
		"exe=/tmp/*\ndevice=/tmp/*\ndevice=/dev/nvidia*\ndevice=/var/lib/gpusnap-*\nkind=hidden_process\nkind=unreadable_process\n"+
		"exe=*/sleep device="+dir+"/dev/*\n"), 0o644))
	return dir, nodes, allow
}

// TestNRIPodLifecycle drives gpusnap nri through NRI's own runtime side over
// its socket, on two fake GPUs (loop devices named nvidia6 and nvidia7): a
// clean pod; a pod that leaves a setsid child mapping its GPU (the diff is
// high, the bundle verifies, syslog has the line); the next pod's container
// on that GPU refused with the check's reason, on the other GPU let through;
// a restart that re-syncs, where a pod with no baseline is said and its
// diff is no clean one.
func TestNRIPodLifecycle(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("NRI live test: needs root (loop devices, mknod)")
	}
	dir, nodes, allow := fakeGPUNode(t, "gpusnap-nri-", 6, 7)
	db, ev, sock := filepath.Join(dir, "gpusnap.db"), filepath.Join(dir, "evidence"), filepath.Join(dir, "nri.sock")
	logs := syslogSink(t, filepath.Join(dir, "log.sock"))
	rt := startNRIRuntime(t, dir)

	var stderr livetest.LockedBuffer
	startPlugin := func() func() {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan int, 1)
		go func() {
			done <- run(ctx, []string{"gpusnap", "--no-nvml", "--db", db, "nri", "--socket", sock, "--evidence-dir", ev,
				"--allow", allow, "--syslog-socket", filepath.Join(dir, "log.sock")}, io.Discard, &stderr)
		}()
		stop := func() {
			cancel()
			if code := <-done; code != 0 {
				t.Errorf("gpusnap nri: exit %d: %s", code, stderr.String())
			}
		}
		t.Cleanup(func() {
			if ctx.Err() == nil {
				stop()
			}
		})
		return stop
	}
	// A pod started before the plugin synchronized is in neither its
	// list nor an event it receives: wait for the line that says so.
	synchronized := func(n int) func() bool {
		return func() bool { return strings.Count(stderr.String(), "synchronized with ") >= n }
	}
	stop := startPlugin()
	waitUntil(t, "the plugin to synchronize", stderr.String, synchronized(1))

	// A clean pod.
	a := pod("aaaaaaaa-0000-4000-8000-000000000001", "clean")
	rt.run(a)
	if err := rt.create(a, gpuContainer(a, 6)); err != nil {
		t.Fatalf("clean pod's container refused: %v\n%s", err, stderr.String())
	}
	rt.stop(a)
	waitUntil(t, "the clean pod's diff", stderr.String, func() bool { return strings.Contains(stderr.String(), a.Uid+"): clean") })

	// A pod whose worker leaves a setsid child mapping GPU 0.
	b := pod("bbbbbbbb-0000-4000-8000-000000000002", "leaky")
	rt.run(b)
	if err := rt.create(b, gpuContainer(b, 6)); err != nil {
		t.Fatalf("pod b's container refused: %v\n%s", err, stderr.String())
	}
	ghost := livetest.StartGhost(t, &livetest.Loop{Node: nodes[0]}, livetest.Options{Exe: filepath.Join(dir, "bin", "worker")}).Ghost
	rt.stop(b)
	waitUntil(t, "the leaky pod's diff", stderr.String, func() bool { return strings.Contains(stderr.String(), b.Uid+") left GPU state behind") })
	report, err := os.ReadFile(filepath.Join(ev, "pod-"+b.Uid+".txt"))
	noErr(t, err)
	if first := strings.SplitN(string(report), "\n", 2)[0]; !hasFinding(string(report), "leftover_device_mapping", ghost.PID) ||
		!strings.HasPrefix(first, "gpusnap diff: ") || strings.Contains(first, " 0 high") {
		t.Errorf("pod b's report:\n%s", report)
	}
	if code, out, errs := gpusnap(t, "verify", filepath.Join(ev, "pod-"+b.Uid+".tar.gz")); code != 0 {
		t.Errorf("verify pod b's bundle: exit %d: %s %s", code, out, errs)
	}
	waitUntil(t, "the syslog line", logs.String, func() bool { return strings.Contains(logs.String(), b.Uid+") left GPU state behind") })

	// The next pod: GPU 6 is refused with the check's reason, GPU 7 is not.
	c := pod("cccccccc-0000-4000-8000-000000000003", "next")
	rt.run(c)
	err = rt.create(c, gpuContainer(c, 6))
	if want := fmt.Sprintf("gpu_in_use of nvidia6 by %d", ghost.PID); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("pod c's container on GPU 6: %v, want a refusal naming %q", err, want)
	}
	if _, serr := os.Stat(filepath.Join(ev, "pod-"+c.Uid+".check-1.txt")); serr != nil {
		t.Errorf("the refusal's report: %v", serr)
	}
	if err := rt.create(c, gpuContainer(c, 7)); err != nil {
		t.Errorf("pod c's container on the clean GPU 7 refused: %v", err)
	}

	// A pod given GPU 7 whose process uses GPU 6: outside its allocation,
	// which its first GPU container recorded (no kubelet here).
	d := pod("dddddddd-0000-4000-8000-000000000004", "stray")
	rt.run(d)
	if err := rt.create(d, gpuContainer(d, 7)); err != nil {
		t.Fatalf("pod d's container on GPU 7 refused: %v", err)
	}
	join := livetest.PodCgroup(t, d.Uid)
	stray := livetest.StartGhost(t, &livetest.Loop{Node: nodes[0]}, livetest.Options{Exe: filepath.Join(dir, "bin", "stray")}).Ghost
	join(stray.PID)
	rt.stop(d)
	waitUntil(t, "pod d's diff", stderr.String, func() bool { return strings.Contains(stderr.String(), d.Uid+") left GPU state behind") })
	report, err = os.ReadFile(filepath.Join(ev, "pod-"+d.Uid+".txt"))
	noErr(t, err)
	if !hasFinding(string(report), "out_of_allocation_gpu_use", stray.PID) {
		t.Errorf("pod d's report has no out_of_allocation_gpu_use of %d:\n%s", stray.PID, report)
	}

	stop()
	checkResync(t, rt, func() { startPlugin() }, &stderr, synchronized(2), c)
}

// checkResync restarts the stopped plugin: it re-syncs, kept keeps its
// baseline, and a pod started while the plugin was down has none, is said,
// and is never diffed clean.
func checkResync(t *testing.T, rt *nriRuntime, start func(), stderr *livetest.LockedBuffer, synchronized func() bool, kept *adaptation.PodSandbox) {
	e := pod("eeeeeeee-0000-4000-8000-000000000005", "unseen")
	rt.mu.Lock()
	rt.pods = append(rt.pods, e)
	rt.mu.Unlock()
	start()
	waitUntil(t, "the plugin to synchronize again", stderr.String, synchronized)
	waitUntil(t, "the re-sync", stderr.String, func() bool { return strings.Contains(stderr.String(), e.Uid+"): running with no baseline") })
	if strings.Contains(stderr.String(), kept.Uid+"): running with no baseline") {
		t.Errorf("re-sync: pod %s's baseline not found:\n%s", kept.Uid, stderr.String())
	}
	rt.stop(e)
	waitUntil(t, "pod e's diff", stderr.String, func() bool { return strings.Contains(stderr.String(), e.Uid+"): node not checked") })
	if strings.Contains(stderr.String(), e.Uid+"): clean") {
		t.Errorf("a pod with no baseline was diffed clean")
	}
}

// TestNRIRefusesWhatItCannotCheckInTime: with a driver that never answers
// (a libnvidia-ml whose init hangs) and NRI's default 2 s request timeout,
// the plugin refuses the pod and the GPU container before the runtime stops
// waiting, saying why: never a pass by timeout.
func TestNRIRefusesWhatItCannotCheckInTime(t *testing.T) {
	lib := livetest.HungNVML(t)
	dir := t.TempDir()
	rt := startNRIRuntime(t, dir)
	adaptation.SetPluginRequestTimeout(adaptation.DefaultPluginRequestTimeout)
	cmd := withLibrary(gpusnapProc("--db", filepath.Join(dir, "gpusnap.db"), "--nvml-timeout", "1h", "--require-nvml", "nri",
		"--socket", filepath.Join(dir, "nri.sock"), "--evidence-dir", filepath.Join(dir, "evidence")), lib)
	var stderr livetest.LockedBuffer
	cmd.Stderr = &stderr
	noErr(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	waitUntil(t, "the plugin to synchronize", stderr.String, func() bool { return strings.Contains(stderr.String(), "synchronized with ") })

	p := pod("ffffffff-0000-4000-8000-000000000006", "hung")
	// As containerd does (and run does): a request made while the plugin
	// still synchronizes waits for it, and so reaches it.
	block := rt.rt.BlockPluginSync()
	start := time.Now()
	err := rt.rt.RunPodSandbox(context.Background(), &adaptation.RunPodSandboxRequest{Pod: p})
	took := time.Since(start)
	block.Unblock()
	if err == nil || !strings.Contains(err.Error(), "did not finish within NRI's request timeout") {
		t.Errorf("RunPodSandbox with a hung driver: %v, want a refusal", err)
	}
	if took >= adaptation.DefaultPluginRequestTimeout {
		t.Errorf("RunPodSandbox answered after %s, past NRI's %s", took, adaptation.DefaultPluginRequestTimeout)
	}
	// GPU 9: no other test's fake GPU. The driver that hung once is not
	// waited for again; --require-nvml makes memory it cannot read a refusal.
	start = time.Now()
	err = rt.create(p, gpuContainer(p, 9))
	if took := time.Since(start); err == nil || !strings.Contains(err.Error(), "NVML") && !strings.Contains(err.Error(), "did not finish") || took >= adaptation.DefaultPluginRequestTimeout {
		t.Errorf("CreateContainer with a hung driver: %v after %s, want a refusal for NVML within NRI's timeout", err, took)
	}
	t.Logf("refused: %v", err)
}

// hasFinding reports whether a text report names a finding of kind about pid.
func hasFinding(report, kind string, pid int) bool {
	_, ok := livetest.ReportFinding(report, kind, pid)
	return ok
}

// TestNRIReapsPodLeftovers: gpusnap nri --reap, run in a pid and mount
// namespace of the test's own (where it sees and can signal no other test's
// processes), ends at a pod's end the setsid ghost the pod left on its fake
// GPU: the evidence is written and verifies, the test's pidfd on the ghost
// reports its exit, and the plugin's line (stderr and syslog) names the
// ghost by PID@START. A clean pod's end ends nothing and keeps nothing.
func TestNRIReapsPodLeftovers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("NRI reap live test: needs root (loop devices, namespaces)")
	}
	livetest.Require(t, "losetup", "gcc", "unshare", "nsenter", "python3")
	loop := livetest.NewLoop(t)
	dir, err := os.MkdirTemp("/run", "gpusnap-nri-reap-")
	noErr(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	// The tenant's binary outside /tmp: a binary under /tmp is a sign of
	// compromise, whose memory reap would keep first.
	b, err := os.ReadFile(livetest.TenantBinary(t))
	noErr(t, err)
	worker := filepath.Join(dir, "worker")
	noErr(t, os.WriteFile(worker, b, 0o755))
	db, ev, sock, logSock := filepath.Join(dir, "gpusnap.db"), filepath.Join(dir, "evidence"), filepath.Join(dir, "nri.sock"), filepath.Join(dir, "log.sock")
	logs := syslogSink(t, logSock)
	rt := startNRIRuntime(t, dir)

	var stderr livetest.LockedBuffer
	plugin := gpusnapProc("--no-nvml", "--capture", "proc", "--db", db, "nri", "--socket", sock, "--evidence-dir", ev,
		"--reap", "--reap-grace", "2s", "--syslog-socket", logSock)
	// Registered before the namespace, so that it runs after the
	// namespace's cleanup has ended the plugin.
	t.Cleanup(func() {
		if plugin.Process != nil {
			_ = plugin.Process.Kill()
			_ = plugin.Wait()
		}
	})
	ns := livetest.NewNamespace(t)
	in := ns.Command(plugin.Path, plugin.Args[1:]...)
	in.Env, in.Stderr = plugin.Env, &stderr
	plugin = in
	noErr(t, plugin.Start())
	waitUntil(t, "the plugin to synchronize", stderr.String, func() bool { return strings.Contains(stderr.String(), "synchronized with ") })

	// A clean pod: nothing ended, nothing kept.
	a := pod("aaaaaaaa-0000-4000-8000-0000000000a1", "clean")
	rt.run(a)
	rt.stop(a)
	waitUntil(t, "the clean pod's reap", stderr.String, func() bool {
		return strings.Contains(stderr.String(), a.Uid+"): reaped nothing; clean after; nothing kept")
	})

	// A pod that leaves a setsid ghost holding and mapping the fake GPU.
	bp := pod("bbbbbbbb-0000-4000-8000-0000000000b2", "leaky")
	rt.run(bp)
	pids := filepath.Join(dir, "pids")
	start := ns.Command("sh", "-c", `"$WORKER" -g "$NODE" "$PIDS" </dev/null >/dev/null 2>&1`)
	start.Env = append(os.Environ(), "WORKER="+worker, "NODE="+loop.Node, "PIDS="+pids)
	noErr(t, start.Run())
	var ghost livetest.Proc
	waitUntil(t, "the ghost's PID", stderr.String, func() bool {
		text, _ := os.ReadFile(pids)
		for _, line := range strings.Split(string(text), "\n") {
			if f := strings.Fields(line); len(f) == 4 && f[0] == "ghost" {
				nspid, _ := strconv.Atoi(f[2])
				ghost = ns.Proc(t, nspid)
				return strconv.FormatUint(ghost.StartTime, 10) == f[3]
			}
		}
		return false
	})
	fd, err := unix.PidfdOpen(ghost.PID, 0)
	noErr(t, err)
	t.Cleanup(func() { unix.Close(fd) })
	if !ghost.Alive() {
		t.Fatalf("the ghost %d exited before the pod's end", ghost.PID)
	}
	rt.stop(bp)
	name := fmt.Sprintf("%d@%d (worker)", ghost.NSPID, ghost.StartTime)
	waitUntil(t, "the leaky pod's reap", stderr.String, func() bool {
		return strings.Contains(stderr.String(), bp.Uid+"): reaped "+name+"; clean after; evidence ")
	})
	if err := testwait.For(5*time.Second, "the ghost to exit", func() bool {
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
		return err == nil && n > 0
	}); err != nil {
		t.Errorf("the ghost %d still runs after the plugin reaped it", ghost.PID)
	}
	base := filepath.Join(ev, "pod-"+bp.Uid)
	if code, out, errs := gpusnap(t, "verify", filepath.Join(base+".reap", "bundle.tar.gz")); code != 0 {
		t.Errorf("verify the reap's bundle: exit %d: %s %s", code, out, errs)
	}
	report, err := os.ReadFile(base + ".reap.txt")
	noErr(t, err)
	if !strings.Contains(string(report), "done    terminate    "+name) || !strings.Contains(string(report), "after: clean\n  gpu 0: clean") {
		t.Errorf("the reap's report:\n%s", report)
	}
	waitUntil(t, "the syslog line", logs.String, func() bool { return strings.Contains(logs.String(), bp.Uid+"): reaped "+name) })
	if _, err := os.Stat(filepath.Join(ev, "pod-"+a.Uid+".reap.txt")); !os.IsNotExist(err) {
		t.Errorf("the clean pod's reap kept a report: %v", err)
	}
}

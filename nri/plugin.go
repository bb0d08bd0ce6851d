// Package nri is gpusnap's NRI plugin, the per-pod lifecycle on containerd
// and CRI-O. It baselines at RunPodSandbox with the pod UID as tenant and
// refuses there a pod whose GPUs the kubelet lists and that baseline finds
// not clean, refuses a GPU container at CreateContainer whose GPUs are not
// clean, and diffs at StopPodSandbox (or RemovePodSandbox when the stop was
// missed). The work is the CLI's baseline, check and diff, behind Gate.
package nri

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"

	"github.com/gpusnap/gpusnap/internal/safetext"
	"github.com/gpusnap/gpusnap/snapshot"
)

// Gate does the work, with the same baseline, check and diff as gpusnap
// baseline, check and diff --tenant.
type Gate interface {
	// Baseline stores the pod's baseline, with gpus as its allocation, or
	// (gpus nil) the kubelet's when it lists the pod. The allocation it
	// recorded is judged as Check judges it, from the capture it stores (no
	// gap to step off a GPU in). Its error says the baseline was not stored.
	Baseline(ctx context.Context, pod Pod, gpus *snapshot.GPUSet) (Judged, error)
	// Check checks gpus (nil for every GPU). A non-nil error is the one-line
	// reason the GPUs are not known to be clean.
	Check(ctx context.Context, pod Pod, gpus *snapshot.GPUSet) error
	// Diff diffs the host against the pod's baseline and reports it.
	Diff(ctx context.Context, pod Pod)
	// HasBaseline says whether the store holds a baseline of the pod.
	HasBaseline(uid string) (bool, error)
}

// Judged is a stored baseline's allocation (nil if none was recorded) and
// the check of it from the same capture. NotClean is Check's error, nil when
// clean or when no GPU was judged.
type Judged struct {
	Allocation *snapshot.GPUSet
	NotClean   error
}

// Pod is a pod as the plugin names it. The runtime hands over what the pod's
// owner wrote, so UID is checked to be a UID (it names the tenant and the
// evidence files), and the names are bounded and escaped, for messages only.
type Pod struct {
	UID, Namespace, Name string
}

func (p Pod) String() string { return p.Namespace + "/" + p.Name + " (" + p.UID + ")" }

// maxName bounds a pod's namespace and name in messages. Kubernetes allows
// 253.
const maxName = 253

func podOf(s *api.PodSandbox) (Pod, error) {
	p := Pod{UID: s.GetUid(), Namespace: bounded(s.GetNamespace()), Name: bounded(s.GetName())}
	if !validUID(p.UID) {
		return p, fmt.Errorf("gpusnap: pod %s/%s: UID %q is not a pod UID", p.Namespace, p.Name, bounded(p.UID))
	}
	return p, nil
}

func bounded(s string) string {
	if len(s) > maxName {
		s = s[:maxName] + "..."
	}
	return safetext.Escape(s)
}

// validUID accepts what the API server assigns, a UUID of lower-case hex and
// dashes. Anything else could steer an evidence file's name.
func validUID(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	return strings.Trim(s, "0123456789abcdef-") == ""
}

// Plugin is the NRI plugin. Its zero value is not usable, so make one with
// New.
type Plugin struct {
	gate   Gate
	log    io.Writer
	margin time.Duration // answered this long before NRI's request timeout
	// cdiSpecDirs are where a container's CDI devices are looked up
	// (cdi.DefaultSpecDirs when nil).
	cdiSpecDirs []string

	mu   sync.Mutex
	pods map[string]*podState // by sandbox id
	wg   sync.WaitGroup       // diffs in flight
	stub stub.Stub
}

type podState struct {
	allocated bool // the baseline records an allocation
	gpuSeen   bool // a container given GPUs was created
	diffed    bool
}

// New makes the plugin, logging what it does and every refusal to log. A
// container's CDI devices are looked up in the specs of cdiSpecDirs (the
// runtimes' default directories when nil).
func New(gate Gate, log io.Writer, cdiSpecDirs []string) *Plugin {
	return &Plugin{gate: gate, log: log, margin: 250 * time.Millisecond, pods: map[string]*podState{}, cdiSpecDirs: cdiSpecDirs}
}

// Run connects to the runtime's NRI socket and serves until ctx is done or
// the runtime closes the connection, then waits for the diffs in flight. The
// failure policy asks the runtime to fail a request the plugin did not
// answer in time (a refusal, not a pass), and to keep the plugin.
func (p *Plugin) Run(ctx context.Context, socket string) error {
	s, err := stub.New(p, stub.WithPluginName("gpusnap"), stub.WithPluginIdx("10"), stub.WithSocketPath(socket),
		stub.WithFailurePolicy(&api.FailurePolicy{FailRequest: true, KeepConnected: true}))
	if err != nil {
		return fmt.Errorf("nri: %w", err)
	}
	p.stub = s
	err = s.Run(ctx)
	p.wg.Wait()
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("nri %s: %w", socket, err)
	}
	return nil
}

// Configure subscribes to the pod and container events the plugin acts on.
func (p *Plugin) Configure(_ context.Context, _, runtime, version string) (api.EventMask, error) {
	p.logf("registered with %s %s", bounded(runtime), bounded(version))
	var m api.EventMask
	m.Set(api.Event_RUN_POD_SANDBOX, api.Event_STOP_POD_SANDBOX, api.Event_REMOVE_POD_SANDBOX, api.Event_CREATE_CONTAINER)
	return m, nil
}

// Synchronize takes in the pods already running (a plugin restart). Each
// keeps its baseline. One without is said, and its diff will say so too.
func (p *Plugin) Synchronize(_ context.Context, pods []*api.PodSandbox, _ []*api.Container) ([]*api.ContainerUpdate, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range pods {
		pod, err := podOf(s)
		if err != nil {
			p.logf("%v: not tracked", err)
			continue
		}
		ok, err := p.gate.HasBaseline(pod.UID)
		switch {
		case err != nil:
			p.logf("pod %s: its baseline cannot be read: %v", pod, err)
		case !ok:
			p.logf("pod %s: running with no baseline: its diff will not be clean, it will say so", pod)
		}
		// Whether the baseline records an allocation is not known here. It
		// is taken as recorded, so that a later GPU container does not
		// record one in its place.
		p.pods[s.GetId()] = &podState{allocated: true, gpuSeen: true}
	}
	// From here on the runtime sends each new pod's events. A pod started
	// before this line may have been in neither the list nor an event.
	p.logf("synchronized with %d running pods", len(pods))
	return nil, nil
}

// RunPodSandbox stores the pod's baseline. A pod whose baseline cannot be
// taken is refused, since its end could not be diffed. So is a pod whose
// GPUs the kubelet lists and the baseline finds not clean. A process on them
// at the baseline that let go before a container's check would pass that
// check, and the runtime tries the sandbox again with a new baseline.
func (p *Plugin) RunPodSandbox(ctx context.Context, s *api.PodSandbox) error {
	pod, err := podOf(s)
	if err != nil {
		return err
	}
	j, err := within(ctx, p, func(ctx context.Context) (Judged, error) { return p.gate.Baseline(ctx, pod, nil) })
	if err != nil {
		return fmt.Errorf("gpusnap: pod %s: no baseline: %w", pod, err)
	}
	if j.NotClean != nil {
		p.logf("refused pod %s: %v", pod, j.NotClean)
		return fmt.Errorf("gpusnap: pod %s: GPUs %s not clean: %w", pod, gpuText(j.Allocation), j.NotClean)
	}
	p.mu.Lock()
	p.pods[s.GetId()] = &podState{allocated: j.Allocation != nil}
	p.mu.Unlock()
	return nil
}

// CreateContainer checks the GPUs a container is given and refuses it, with
// the check's reason, unless they are clean. The pod's first GPU container
// records the allocation where the kubelet gave none, in a new baseline
// whose capture is the one the check judges.
func (p *Plugin) CreateContainer(ctx context.Context, s *api.PodSandbox, c *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	gpus, given := containerGPUs(c, p.cdiSpecDirs)
	if !given {
		return nil, nil, nil
	}
	pod, err := podOf(s)
	if err != nil {
		return nil, nil, err
	}
	p.mu.Lock()
	st := p.pods[s.GetId()]
	first := st != nil && !st.gpuSeen && !st.allocated
	if st != nil {
		st.gpuSeen = true
	}
	p.mu.Unlock()
	_, err = within(ctx, p, func(ctx context.Context) (struct{}, error) {
		if first && gpus != nil {
			j, err := p.gate.Baseline(ctx, pod, gpus)
			return struct{}{}, cmp.Or(err, j.NotClean)
		}
		return struct{}{}, p.gate.Check(ctx, pod, gpus)
	})
	if err != nil {
		p.logf("refused container %s of pod %s: %v", bounded(c.GetName()), pod, err)
		return nil, nil, fmt.Errorf("gpusnap: GPUs %s not clean: %w", gpuText(gpus), err)
	}
	return nil, nil, nil
}

// StopPodSandbox diffs the pod. The diff runs beside the runtime, which does
// not wait for it, so what the pod left behind stays to be seen.
func (p *Plugin) StopPodSandbox(_ context.Context, s *api.PodSandbox) error {
	p.diff(s)
	return nil
}

// RemovePodSandbox diffs a pod whose stop was not seen, and forgets it.
func (p *Plugin) RemovePodSandbox(_ context.Context, s *api.PodSandbox) error {
	p.diff(s)
	p.mu.Lock()
	delete(p.pods, s.GetId())
	p.mu.Unlock()
	return nil
}

// diffTimeout bounds one diff, which is a capture, the store and a bundle.
const diffTimeout = 5 * time.Minute

func (p *Plugin) diff(s *api.PodSandbox) {
	pod, err := podOf(s)
	if err != nil {
		p.logf("%v: not diffed", err)
		return
	}
	p.mu.Lock()
	st := p.pods[s.GetId()]
	if st == nil {
		st = &podState{} // a pod started before the plugin and not synchronized, whose diff says what it lacks
		p.pods[s.GetId()] = st
	}
	done := st.diffed
	st.diffed = true
	p.mu.Unlock()
	if done {
		return
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), diffTimeout)
		defer cancel()
		p.gate.Diff(ctx, pod)
	}()
}

// within runs fn under NRI's request timeout, less a margin to answer in.
// What does not finish by then is refused, never let through by a runtime
// that stopped waiting.
func within[T any](ctx context.Context, p *Plugin, fn func(context.Context) (T, error)) (T, error) {
	timeout := stub.DefaultRequestTimeout
	if p.stub != nil {
		timeout = p.stub.RequestTimeout()
	}
	ctx, cancel := context.WithTimeout(ctx, timeout-p.margin)
	defer cancel()
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := fn(ctx)
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, fmt.Errorf("did not finish within NRI's request timeout (%s)", timeout)
	}
}

func (p *Plugin) logf(format string, args ...any) {
	fmt.Fprintf(p.log, "gpusnap nri: %s\n", safetext.Line(fmt.Sprintf(format, args...)))
}

func gpuText(gpus *snapshot.GPUSet) string {
	if gpus == nil {
		return "all"
	}
	return gpus.String()
}

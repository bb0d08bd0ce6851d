// Package watch records, as they happen, the opens and mappings of NVIDIA
// devices and the lives of the processes making them, into the store's event
// log (docs/watch.md). It hears them through eBPF where BPF loads, else the
// proc connector and /proc rescans. It also polls NVML's process lists and
// records its GPU events (Xids, ECC errors, a lost GPU).
package watch

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpusnap/gpusnap/bpf"
	"github.com/gpusnap/gpusnap/capture"
	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/nvmlread"
)

// Modes of Options.Mode.
const (
	ModeAuto     = "auto"                // BPF where it loads, else the fallback
	ModeBPF      = "bpf"                 // BPF or an error
	ModeFallback = eventlog.ModeFallback // the proc connector and rescans, without trying BPF
)

// Defaults of Options.
const (
	DefaultInterval = time.Second
	// DefaultUtilInterval is --util-interval's default. NVML's own sample
	// period is about a second, and a shorter one reads the same figure
	// twice.
	DefaultUtilInterval = time.Second
	DefaultRetain       = 30 * 24 * time.Hour
	flushEvery          = 200 * time.Millisecond
	// maxPending bounds the events kept while the log cannot be written (a
	// full disk). Past it they are counted as lost, and said. docs/watch.md
	// gives the memory it bounds.
	maxPending = 1 << 17
)

// Metrics counts what watch records for a metrics server (gpusnap-full's
// watch --listen serves metrics.Watch). Options without one count nothing.
type Metrics interface {
	AddEvent(kind string)
	AddLost(n uint64)
	Flushed(t time.Time)
	SetMode(mode string)
}

// noMetrics counts nothing, for a watch without a metrics server.
type noMetrics struct{}

func (noMetrics) AddEvent(string)   {}
func (noMetrics) AddLost(uint64)    {}
func (noMetrics) Flushed(time.Time) {}
func (noMetrics) SetMode(string)    {}

// Options say what to watch and where to record it.
type Options struct {
	DB       string // the store file, whose log is eventlog.JournalDir(DB)
	ProcRoot string // "" is /proc
	NVML     nvmlread.Options
	Interval time.Duration // fallback rescans
	// UtilInterval is how often NVML is read, for its process lists and the
	// utilization samples of util records.
	UtilInterval time.Duration
	Mode         string
	Hooks        []bpf.Hook    // the BPF hooks to try, best first (all when nil)
	Retain       time.Duration // segments older than this are removed
	Metrics      Metrics       // none when nil
	Log          io.Writer     // what the watch says about itself (its mode, what it cannot see, lost events)
	// Started, when set, is called once the watch records, with its start record.
	Started func(eventlog.Event)
}

// Stats are what a watch did, returned when it stops.
type Stats struct {
	Mode       string
	Events     map[string]int // recorded, by kind
	Lost       uint64         // events the kernel (or the proc connector) dropped
	Flushes    int
	MaxLatency time.Duration // from an event to its line synced to disk, the slowest
	SumLatency time.Duration // summed over every kernel event, for the mean
	Timed      int
}

// Run records events until ctx is done, then flushes every event seen and
// returns. The error names what kept it from starting.
func Run(ctx context.Context, opts Options) (Stats, error) {
	if opts.ProcRoot == "" {
		opts.ProcRoot = "/proc"
	}
	if opts.Metrics == nil {
		opts.Metrics = noMetrics{}
	}
	opts.Interval = cmpOr(opts.Interval, DefaultInterval)
	opts.UtilInterval = cmpOr(opts.UtilInterval, DefaultUtilInterval)
	opts.Retain = cmpOr(opts.Retain, DefaultRetain)
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	j, err := eventlog.OpenJournal(eventlog.JournalDir(opts.DB))
	if err != nil {
		return Stats{}, err
	}
	defer j.Close()
	_ = j.Prune(time.Now().Add(-opts.Retain))

	proc, err := capture.OpenProcRoot(opts.ProcRoot)
	if err != nil {
		return Stats{}, err
	}
	defer proc.Close()
	for _, e := range proc.Errs {
		fmt.Fprintf(opts.Log, "gpusnap watch: %s\n", e)
	}
	majors := append([]uint32{195}, slices.Sorted(maps.Keys(proc.Classes().NVIDIAMajors))...)

	r := &recorder{j: j, metrics: opts.Metrics, stats: Stats{Events: map[string]int{}}, log: opts.Log, repeats: newRepeats()}
	start := eventlog.Event{Time: time.Now(), Kind: eventlog.KindWatchStart}
	kw, ks, fb, err := openSource(ctx, opts, proc, majors, r, &start)
	if err != nil {
		return Stats{}, err
	}
	if kw != nil {
		defer kw.Close()
	}
	nv := newNVMLPoll(opts.NVML, proc)
	if err := nv.poll(ctx, r.emit); err != nil {
		return Stats{}, err
	}
	if nv.off != "" {
		start.Blind = append(start.Blind, eventlog.BlindNVMLProcesses+" ("+nv.off+")")
	}
	gpuEvents, blind := openGPUEvents(opts.NVML)
	start.Blind = append(start.Blind, blind...)
	r.stats.Mode = start.Mode
	r.emit(start)
	if err := r.flush(); err != nil {
		if gpuEvents != nil {
			gpuEvents.Close()
		}
		return r.stats, err
	}
	announce(opts.Log, j.Dir(), start)
	opts.Metrics.SetMode(start.Mode)
	if opts.Started != nil {
		opts.Started(start)
	}

	kernelDone := make(chan error, 1)
	if ks != nil {
		go func() { kernelDone <- ks.run(r.emitTimed) }()
	}
	stopGPU := startGPUEvents(ctx, gpuEvents, r) // stopped below, where every path from here leads
	el := &eventLoop{opts: opts, j: j, r: r, kw: kw, fb: fb, nv: nv, mode: start.Mode}
	runErr := el.serve(ctx, kernelDone)
	if runErr == nil {
		runErr = drain(kw, fb, kernelDone, r)
	}
	if !stopGPU() {
		fmt.Fprintf(opts.Log, "gpusnap watch: NVML's wait for GPU events did not return; stopping without it\n")
	}
	r.flushRepeats()
	nv.util.flush(r.emit)
	r.emit(eventlog.Event{Time: time.Now(), Kind: eventlog.KindWatchStop, Mode: start.Mode, Lost: r.stats.Lost, GPUEventsOff: r.gpuEventsOffNow()})
	if err := r.flush(); err != nil {
		return r.stats, err
	}
	return r.stats, runErr
}

// eventLoop is what the event loop of a watch serves, the journal it writes,
// the recorder, and the sources it polls (kw and fb may be nil).
type eventLoop struct {
	opts Options
	j    *eventlog.Journal
	r    *recorder
	kw   *bpf.Watch
	fb   *fallbackSource
	nv   *nvmlPoll
	mode string
}

// serve flushes, rescans, polls NVML, prunes and beats until ctx is done
// (nil) or the kernel's events fail (that error).
func (l *eventLoop) serve(ctx context.Context, kernelDone <-chan error) error {
	flush := time.NewTicker(flushEvery)
	defer flush.Stop()
	tick := time.NewTicker(l.opts.Interval)
	defer tick.Stop()
	utilTick := time.NewTicker(l.opts.UtilInterval)
	defer utilTick.Stop()
	prune := time.NewTicker(time.Hour)
	defer prune.Stop()
	alive := time.NewTicker(eventlog.AliveEvery)
	defer alive.Stop()
	asked := l.j.WatchFlushRequests() // a diff waiting for the log to reach its TO
	lastRepeats := time.Now()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-kernelDone:
			return fmt.Errorf("reading the kernel's events: %w", err)
		case <-flush.C:
			if l.kw != nil {
				l.r.noteLost(l.kw)
			}
			if asked.Asked() {
				l.nv.util.flush(l.r.emit) // the reader waits for samples up to its time too
				l.r.heartbeat(l.mode)
			}
			if time.Since(lastRepeats) >= repeatEvery {
				l.r.flushRepeats()
				lastRepeats = time.Now()
			}
			if err := l.r.flush(); err != nil {
				fmt.Fprintf(l.opts.Log, "gpusnap watch: %v (kept in memory, retried)\n", err)
			}
		case <-tick.C:
			if l.fb != nil {
				if err := l.fb.rescan(ctx, l.r.emit); err != nil && ctx.Err() == nil {
					fmt.Fprintf(l.opts.Log, "gpusnap watch: rescan: %v\n", err)
				}
			}
		case <-utilTick.C:
			if err := l.nv.poll(ctx, l.r.emit); err != nil && ctx.Err() == nil {
				fmt.Fprintf(l.opts.Log, "gpusnap watch: NVML: %v\n", err)
			}
		case <-prune.C:
			_ = l.j.Prune(time.Now().Add(-l.opts.Retain))
		case <-alive.C:
			l.r.heartbeat(l.mode)
		}
	}
}

// openSource opens the kernel's hooks (unless the fallback is asked for),
// or else the fallback, and writes into start the mode and what it cannot
// see. The error is BPF's where only BPF will do.
func openSource(ctx context.Context, opts Options, proc *capture.ProcRoot, majors []uint32, r *recorder, start *eventlog.Event) (*bpf.Watch, *kernelSource, *fallbackSource, error) {
	if opts.Mode != ModeFallback {
		kw, err := bpf.Open(majors, opts.Hooks)
		if err != nil && opts.Mode == ModeBPF {
			return nil, nil, nil, err
		}
		if err == nil {
			start.Mode, start.Blind = string(kw.Hook), blindSpots[kw.Hook]
			if len(kw.Refused) > 0 {
				start.Note = "better hooks refused: " + strings.Join(kw.Refused, "; ")
			}
			for _, tp := range kw.Unattached {
				start.Blind = append(start.Blind, unattachedBlind(tp))
			}
			return kw, newKernelSource(kw, proc), nil, nil
		}
		start.Note = "BPF does not load here: " + err.Error()
	}
	fb := newFallbackSource(proc, opts.Interval)
	deaf := ownProc(opts.ProcRoot)
	if deaf == nil {
		deaf = fb.listen(ctx, r.lostNote)
	}
	start.Mode, start.Blind = ModeFallback, fallbackBlind(deaf)
	return nil, nil, fb, nil
}

// ownProc says why the proc connector is of no use for root, or nil. The
// connector names the processes of this pid namespace, and a fallback that
// trusted it would wait up to its long sweep for the processes of another
// root.
func ownProc(root string) error {
	if self, err := os.Readlink(filepath.Join(root, "self")); err != nil || self != strconv.Itoa(os.Getpid()) {
		return fmt.Errorf("proc connector not used: %s is not this pid namespace's /proc", root)
	}
	return nil
}

// announce says on the watch's log how it records, and what it cannot see.
func announce(log io.Writer, dir string, start eventlog.Event) {
	fmt.Fprintf(log, "gpusnap watch: recording into %s in %s mode\n", dir, start.Mode)
	if start.Note != "" {
		fmt.Fprintf(log, "gpusnap watch: %s\n", start.Note)
	}
	for _, b := range start.Blind {
		fmt.Fprintf(log, "gpusnap watch: cannot see %s\n", b)
	}
}

// startGPUEvents records NVML's GPU events (where gpuEvents is not nil)
// until the returned stop is called. stop reports whether the wait under way
// returned within gpuEventWait (a hung driver's does not).
func startGPUEvents(ctx context.Context, gpuEvents *nvmlread.GPUEvents, r *recorder) (stop func() bool) {
	gpuCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	if gpuEvents != nil {
		go func() {
			defer close(done)
			recordGPUEvents(gpuCtx, gpuEvents, r)
		}()
	} else {
		close(done)
	}
	return func() bool {
		cancel()
		select {
		case <-done:
			return true
		case <-time.After(gpuEventWait):
			return false
		}
	}
}

// drain stops the source at the watch's end. It detaches the kernel's hooks
// and reads what their ring buffer still holds, or runs one last rescan (the
// ends of device users since the one before).
func drain(kw *bpf.Watch, fb *fallbackSource, kernelDone <-chan error, r *recorder) error {
	var err error
	if kw != nil {
		if kw.Stop() == nil {
			err = <-kernelDone
		}
		r.noteLost(kw)
	}
	if fb != nil {
		_ = fb.rescan(context.Background(), r.emit)
	}
	return err
}

func cmpOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// recorder batches events and appends them to the journal.
type recorder struct {
	j       *eventlog.Journal
	metrics Metrics
	log     io.Writer

	mu      sync.Mutex
	repeats *repeats
	pending []eventlog.Event
	timed   []bool // whether pending[i] came from the kernel, whose latency is measured
	stats   Stats
	dropped uint64
	// gpuEventsOff says why NVML's GPU events are not being read now (""
	// when they are), for the heartbeats and the stop record.
	gpuEventsOff atomic.Pointer[string]
}

// setGPUEventsOff records why NVML's GPU events are not being read ("" when
// they are again).
func (r *recorder) setGPUEventsOff(why string) { r.gpuEventsOff.Store(&why) }

func (r *recorder) gpuEventsOffNow() string {
	if why := r.gpuEventsOff.Load(); why != nil {
		return *why
	}
	return ""
}

func (r *recorder) emit(events ...eventlog.Event) { r.add(false, events) }

// emitTimed records kernel events, whose time is the kernel's.
func (r *recorder) emitTimed(events ...eventlog.Event) { r.add(true, events) }

func (r *recorder) add(timed bool, events []eventlog.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range events {
		if e.Kind == eventlog.KindExit && e.Process != nil {
			r.queue(false, r.repeats.end(e.Process.Key())) // its own runs come before its exit, coalesced or not
		}
		if r.repeats.take(&e) {
			continue
		}
		r.queue(timed, []eventlog.Event{e})
	}
}

// queue adds events to the next flush. Past maxPending they are counted as
// lost.
func (r *recorder) queue(timed bool, events []eventlog.Event) {
	for _, e := range events {
		if len(r.pending) >= maxPending {
			r.dropped++
			continue
		}
		r.pending = append(r.pending, e)
		r.timed = append(r.timed, timed)
	}
}

// heartbeat records that the watch runs, every AliveEvery and when a reader
// asks for a record (eventlog.RequestFlush).
func (r *recorder) heartbeat(mode string) {
	r.emit(eventlog.Event{Time: time.Now(), Kind: eventlog.KindAlive, Mode: mode, GPUEventsOff: r.gpuEventsOffNow()})
}

// flushRepeats queues the records of the repeats counted since the last
// call (see repeats.go).
func (r *recorder) flushRepeats() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.queue(false, r.repeats.due())
}

// lostNote records that a source dropped events it could not count.
func (r *recorder) lostNote(why string) {
	r.emit(eventlog.Event{Time: time.Now(), Kind: eventlog.KindLost, Note: why})
	fmt.Fprintf(r.log, "gpusnap watch: events lost: %s\n", why)
}

// noteLost records the kernel's lost-event count when it grew.
func (r *recorder) noteLost(w *bpf.Watch) {
	n, err := w.Lost()
	if err != nil {
		return
	}
	r.mu.Lock()
	n += r.dropped
	grew := n > r.stats.Lost
	delta := n - r.stats.Lost
	r.stats.Lost = n
	r.mu.Unlock()
	if grew {
		r.metrics.AddLost(delta)
		r.emit(eventlog.Event{Time: time.Now(), Kind: eventlog.KindLost, Lost: n, Note: fmt.Sprintf("%d events dropped: the ring buffer was full", delta)})
		fmt.Fprintf(r.log, "gpusnap watch: %d events lost (%d in all): the ring buffer was full\n", delta, n)
	}
}

// flush appends the pending events. On failure they stay pending.
func (r *recorder) flush() error {
	r.mu.Lock()
	batch, timed := r.pending, r.timed
	r.pending, r.timed = nil, nil
	r.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	n, err := r.j.Append(batch)
	if err != nil {
		// What did not reach the log is kept, in order, for the next flush.
		r.mu.Lock()
		r.pending, r.timed = append(batch[n:], r.pending...), append(timed[n:], r.timed...)
		r.mu.Unlock()
		batch, timed = batch[:n], timed[:n]
	}
	done := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(batch) == 0 {
		return err
	}
	r.stats.Flushes++
	for i := range batch {
		r.stats.Events[batch[i].Kind]++
		r.metrics.AddEvent(batch[i].Kind)
		if timed[i] {
			lat := done.Sub(batch[i].Time)
			r.stats.MaxLatency = max(r.stats.MaxLatency, lat)
			r.stats.SumLatency += lat
			r.stats.Timed++
		}
	}
	r.metrics.Flushed(done)
	return err
}

//go:build !gpusnap_common

package metrics

import (
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Watch is the families of a running `gpusnap watch`, served on /metrics
// beside the run families and the watch process's own CPU and memory (what
// watch costs a node is read off process_cpu_seconds_total). They live on a
// client_golang registry, which only gpusnap-full links (the common build
// hands watch --listen to it).
type Watch struct {
	// Events counts the events recorded, by kind.
	Events *prometheus.CounterVec
	// LostEvents counts the events the kernel or watch dropped before they
	// were recorded.
	LostEvents prometheus.Counter
	// LastFlush is when watch last flushed events to the store, in seconds
	// since the epoch.
	LastFlush prometheus.Gauge

	set   *Set
	reg   *prometheus.Registry
	mu    sync.Mutex
	mode  *prometheus.GaugeVec
	modes []string // every mode set so far
}

// Watch registers the watch families on a registry served with the set's
// families. Call it once.
// Each of kinds is exported from the start at zero, since a rate over a
// series that appears late misses its first increase.
func (s *Set) Watch(kinds ...string) *Watch {
	s.SetBuild("watch")
	w := &Watch{
		set: s,
		reg: prometheus.NewRegistry(),
		Events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpusnap_watch_events_total",
			Help: "Events watch recorded, by kind.",
		}, []string{"kind"}),
		LostEvents: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpusnap_watch_lost_events_total",
			Help: "Events lost before watch recorded them (a full kernel ring buffer, a full queue).",
		}),
		LastFlush: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gpusnap_watch_last_flush_timestamp_seconds",
			Help: "When watch last flushed events to the store, in seconds since the Unix epoch.",
		}),
		mode: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpusnap_watch_mode",
			Help: "1 for the way watch hears of events (the hook it loaded, or its fallback), 0 for a mode it left.",
		}, []string{"mode"}),
	}
	w.reg.MustRegister(w.Events, w.LostEvents, w.LastFlush, w.mode,
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewGoCollector())
	for _, k := range kinds {
		w.Events.WithLabelValues(k)
	}
	return w
}

// AddEvent counts one recorded event. A nil Watch (no --listen) counts nothing.
func (w *Watch) AddEvent(kind string) {
	if w != nil {
		w.Events.WithLabelValues(kind).Inc()
	}
}

// AddLost counts n lost events.
func (w *Watch) AddLost(n uint64) {
	if w != nil {
		w.LostEvents.Add(float64(n))
	}
}

// Flushed records when events were last synced to the event log.
func (w *Watch) Flushed(t time.Time) {
	if w != nil {
		w.LastFlush.Set(float64(t.UnixNano()) / 1e9)
	}
}

// SetMode records the mode watch runs in as 1, and the modes it ran in
// before as 0.
func (w *Watch) SetMode(mode string) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !slices.Contains(w.modes, mode) {
		w.modes = append(w.modes, mode)
	}
	for _, m := range w.modes {
		w.mode.WithLabelValues(m).Set(boolValue(m == mode))
	}
}

// Handler serves the watch's and the set's families for Prometheus to
// scrape. A family that fails to gather is an HTTP 500, not a partial page
// read as complete.
func (w *Watch) Handler() http.Handler {
	return promhttp.HandlerFor(prometheus.Gatherers{w.set, w.reg}, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError})
}

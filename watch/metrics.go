package watch

import (
	"github.com/gpusnap/gpusnap/eventlog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the watch's Prometheus families. No label names a process or
// an exe: a tenant could make their number unbounded.
type Metrics struct {
	events    *prometheus.CounterVec
	lost      prometheus.Counter
	mode      *prometheus.GaugeVec
	lastFlush prometheus.Gauge
}

// NewMetrics registers the watch's families with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpusnap_watch_events_total", Help: "Events recorded into the event log, by kind.",
		}, []string{"kind"}),
		lost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpusnap_watch_lost_events_total", Help: "Events the kernel dropped before gpusnap could read them.",
		}),
		mode: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpusnap_watch_mode", Help: "1 for the mode the watch runs in (lsm, fentry, tracepoint or fallback).",
		}, []string{"mode"}),
		lastFlush: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gpusnap_watch_last_flush_timestamp_seconds", Help: "When events were last synced to the event log (Unix time).",
		}),
	}
	for _, c := range []prometheus.Collector{m.events, m.lost, m.mode, m.lastFlush} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	// Every kind is exported from the start, at zero: a rate over a series
	// that appears late misses its first increase.
	for _, k := range []string{eventlog.KindOpen, eventlog.KindMmap, eventlog.KindExec, eventlog.KindFork, eventlog.KindExit, eventlog.KindUsing, eventlog.KindNVML, eventlog.KindLost} {
		m.events.WithLabelValues(k)
	}
	return m, nil
}

func (m *Metrics) addEvent(kind string) {
	if m != nil {
		m.events.WithLabelValues(kind).Inc()
	}
}

func (m *Metrics) addLost(n uint64) {
	if m != nil {
		m.lost.Add(float64(n))
	}
}

func (m *Metrics) setMode(mode string) {
	if m != nil {
		m.mode.Reset()
		m.mode.WithLabelValues(mode).Set(1)
	}
}

func (m *Metrics) flushed(t time.Time) {
	if m != nil {
		m.lastFlush.Set(float64(t.UnixNano()) / 1e9)
	}
}

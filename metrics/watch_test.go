//go:build !gpusnap_common

package metrics

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/internal/livetest"
)

func TestWatchHandler(t *testing.T) {
	s := New("v1.2.3")
	w := s.Watch()
	w.Events.WithLabelValues("open").Add(3)
	w.LostEvents.Add(2)
	w.LastFlush.Set(1764500000)
	w.SetMode("tracepoint")
	w.SetMode("proc-connector")
	srv := httptest.NewServer(w.Handler())
	defer srv.Close()
	res, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	body := string(raw)
	for _, want := range []string{
		`gpusnap_watch_events_total{kind="open"} 3`,
		`gpusnap_watch_lost_events_total 2`,
		`gpusnap_watch_last_flush_timestamp_seconds 1.7645e+09`,
		`gpusnap_watch_mode{mode="proc-connector"} 1`,
		`gpusnap_watch_mode{mode="tracepoint"} 0`,
		`gpusnap_build_info{command="watch",`,
		`process_cpu_seconds_total`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	livetest.PromtoolCheck(t, []byte(body))
}

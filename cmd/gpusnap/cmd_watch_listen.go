//go:build !gpusnap_common

package main

import (
	"fmt"
	"net"
	"net/http"

	"github.com/urfave/cli/v2"

	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/metrics"
	"github.com/gpusnap/gpusnap/watch"
)

// watchAction runs watch in this build, which links the metrics server.
func watchAction() cli.ActionFunc { return action(parseWatch, runWatch) }

// listenMetrics serves the watch families on addr at /metrics until stop is
// called.
func listenMetrics(g globals, addr string) (m watch.Metrics, stop func(), err error) {
	set := metrics.New(buildVersion())
	w := set.Watch(eventlog.KindOpen, eventlog.KindMmap, eventlog.KindExec, eventlog.KindFork, eventlog.KindInherit,
		eventlog.KindExit, eventlog.KindUsing, eventlog.KindNVML, eventlog.KindGPUEvent, eventlog.KindUtil, eventlog.KindLost)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("--listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", w.Handler())
	srv := metrics.Serve(ln, mux)
	fmt.Fprintf(g.Stderr, "gpusnap watch: metrics at http://%s/metrics\n", ln.Addr())
	return w, func() { srv.Close() }, nil
}

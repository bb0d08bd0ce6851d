package metrics

import (
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"
)

// The bounds of the metrics server: any local user can connect to it, and
// watch must not run out of memory (and leave a gap in the window's record)
// for what clients do. Memory is bounded by MaxConns whatever the number of
// clients: the connections past it wait in the kernel's accept queue, not in
// watch; each accepted one is cut once it idles, dawdles over its request
// or takes too long to be written to. A scrape is a few KiB of request and
// well under a second of work.
const (
	MaxConns          = 32
	MaxHeaderBytes    = 8 << 10
	ReadHeaderTimeout = 2 * time.Second
	ReadTimeout       = 5 * time.Second
	WriteTimeout      = 10 * time.Second
	IdleTimeout       = 10 * time.Second
)

// Serve serves h on ln, within the bounds above, until the returned server
// is closed.
func Serve(ln net.Listener, h http.Handler) *http.Server {
	srv := &http.Server{
		Handler:           h,
		MaxHeaderBytes:    MaxHeaderBytes,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
	}
	go func() { _ = srv.Serve(netutil.LimitListener(ln, MaxConns)) }()
	return srv
}

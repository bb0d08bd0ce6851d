package metrics

import (
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"
)

// The bounds of the metrics server, which any local user can reach, keep
// watch from running out of memory, and leaving a gap in the window, for
// what clients do. Connections past MaxConns wait in the kernel's accept
// queue, and each accepted one is cut when it idles or dawdles. A scrape
// needs far less than the bounds allow.
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

// Package lazyregexp compiles a pattern on its first use. A pattern compiled
// at package init costs every gpusnap command at start-up, though most
// commands never match it (a kernel-log Xid, a flag's error message).
package lazyregexp

import (
	"regexp"
	"sync"
)

// New returns the compiled pattern of expr, compiled on the first call. It
// panics then, as regexp.MustCompile does, if expr is not a valid pattern.
func New(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}

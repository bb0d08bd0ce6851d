package main

import (
	"regexp"
	"strings"
)

// result is what one guest's console log says.
type result struct {
	kernel    string
	iterators string            // which capture programs loaded, or why none did
	hooks     map[string]string // what each watch hook caught, or why it was refused
	costs     map[string]string // each watch hook's open/close loop speed, against none
	drm       string            // what the DRM guest's capture, diff and check saw of vgem
	failed    []string          // tests that failed or skipped (in a matrix guest a skip is a failure)
	exit      string            // the test binary's exit, "" where the guest never said
}

var (
	matrixLine = regexp.MustCompile(`^\s+\S+_test\.go:\d+: matrix: (.*)$`)
	caughtLine = regexp.MustCompile(`^(lsm|fentry|kprobe|tracepoint) caught (\d+/\d+) short-lived device users`)
	refusedHk  = regexp.MustCompile(`^(lsm|fentry|kprobe|tracepoint) refused: (.*)$`)
	costLine   = regexp.MustCompile(`^(lsm|fentry|kprobe|tracepoint) open/close: empty programs ([\d.]+x), watch ([\d.]+x)`)
	aboveLine  = regexp.MustCompile(`^(lsm|fentry|kprobe|tracepoint) watch above empty programs: (-?[\d.]+ points)`)
	outcome    = regexp.MustCompile(`^\s*--- (FAIL|SKIP): (\S+)`)
	// cilium/ebpf's words for a kfunc the kernel lacks, shortened for a cell.
	noKfunc = regexp.MustCompile(`program \S+: fixing up kfuncs: kfunc "(\w+)": not supported`)
)

// parseLog reads the lines the tests log for the matrix (those that begin
// "matrix"), the tests' outcomes and the init's own marker lines.
func parseLog(log string) result {
	r := result{kernel: "unknown", hooks: map[string]string{}, costs: map[string]string{}}
	for _, line := range strings.Split(strings.ReplaceAll(log, "\r", ""), "\n") {
		// The console may put terminal escapes before a line of the init's.
		if i := strings.Index(line, marker+" "); i >= 0 {
			rest := line[i+len(marker)+1:]
			if k, ok := strings.CutPrefix(rest, "kernel "); ok {
				r.kernel = k
			}
			if e, ok := strings.CutPrefix(rest, "exit "); ok {
				r.exit = e
			}
			continue
		}
		if m := outcome.FindStringSubmatch(line); m != nil {
			r.failed = append(r.failed, m[2]+" ("+strings.ToLower(m[1])+")")
			continue
		}
		m := matrixLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		text := m[1]
		switch {
		case strings.HasPrefix(text, "drm: "):
			r.drm = strings.TrimPrefix(text, "drm: ")
		case strings.HasPrefix(text, "capture iterators: "):
			r.iterators = noKfunc.ReplaceAllString(strings.TrimPrefix(text, "capture iterators: "), "no kfunc $1")
		case caughtLine.MatchString(text):
			c := caughtLine.FindStringSubmatch(text)
			r.hooks[c[1]] = "loads; caught " + c[2] + " users"
		case costLine.MatchString(text):
			c := costLine.FindStringSubmatch(text)
			r.costs[c[1]] = "; open/close " + c[3] + " (empty programs " + c[2] + ")"
		case aboveLine.MatchString(text):
			c := aboveLine.FindStringSubmatch(text)
			r.costs[c[1]] += ", " + c[2] + " above them round by round"
		case refusedHk.MatchString(text):
			c := refusedHk.FindStringSubmatch(text)
			r.hooks[c[1]] = "refused: " + c[2]
		}
	}
	return r
}

func (r result) passed() bool { return r.exit == "0" && len(r.failed) == 0 }

func (r result) verdict() string {
	switch {
	case r.exit == "":
		return "did not finish"
	case r.passed():
		return "all pass"
	case len(r.failed) == 0:
		return "exit " + r.exit
	}
	return "failed: " + strings.Join(r.failed, ", ")
}

// hook is the cell of a watch hook, what it caught and what it cost.
func (r result) hook(name string) string {
	return strings.TrimPrefix(r.hooks[name]+r.costs[name], "; ")
}

// merge adds what another guest of the same kernel said.
func (r *result) merge(o result) {
	if r.iterators == "" {
		r.iterators = o.iterators
	}
	if r.drm == "" {
		r.drm = o.drm
	}
	for _, m := range []struct{ to, from map[string]string }{{r.hooks, o.hooks}, {r.costs, o.costs}} {
		for k, v := range m.from {
			if m.to[k] == "" {
				m.to[k] = v
			}
		}
	}
	r.failed = append(r.failed, o.failed...)
	if r.exit == "0" || o.exit == "" {
		r.exit = o.exit
	}
}

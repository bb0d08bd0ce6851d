// Command testsummary reads `go test -json` on stdin, prints what plain `go
// test` would, then lists every skipped test with its reason. It exits 1
// where a test skipped for a missing tool, because CI installs every tool the
// tests need and such a skip hides a test that never ran.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// event is one line of test2json's output.
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

// skip is a skipped test and the last line it logged.
type skip struct{ pkg, test, reason string }

func main() {
	skips, err := summarize(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	if !report(os.Stdout, skips) {
		os.Exit(1)
	}
}

// summarize copies the plain output of the event stream in to out, and
// returns the skipped tests.
func summarize(in io.Reader, out io.Writer) ([]skip, error) {
	var skips []skip
	logs := map[string][]string{} // package + test -> its output so far
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			// go test's own messages (a build failure) are not JSON.
			fmt.Fprintln(out, sc.Text())
			continue
		}
		key := e.Package + " " + e.Test
		switch {
		case e.Test == "" && e.Action == "output":
			fmt.Fprint(out, e.Output)
		case e.Action == "output":
			logs[key] = append(logs[key], e.Output)
		case e.Action == "fail" && e.Test == "":
			printUnended(out, logs, e.Package)
		case e.Action == "fail":
			fmt.Fprint(out, strings.Join(logs[key], ""))
			delete(logs, key)
		case e.Action == "skip" && e.Test != "":
			skips = append(skips, skip{e.Package, e.Test, reason(logs[key])})
			delete(logs, key)
		case e.Action == "pass":
			delete(logs, key)
		}
	}
	return skips, sc.Err()
}

// printUnended prints the output of pkg's tests that never ended. A test
// binary that crashes (a panic off the test's goroutine, an exit, a
// timeout) ends its package with a fail but not the test that was running,
// and that test's output is the only account of why.
func printUnended(out io.Writer, logs map[string][]string, pkg string) {
	var keys []string
	for key := range logs {
		if strings.HasPrefix(key, pkg+" ") {
			keys = append(keys, key)
		}
	}
	slices.Sort(keys)
	for _, key := range keys {
		fmt.Fprintf(out, "output of %s, which never ended:\n%s", key, strings.Join(logs[key], ""))
		delete(logs, key)
	}
}

// reason is the message a skipped test logged last, the t.Skip text.
func reason(lines []string) string {
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l != "" && !strings.HasPrefix(l, "---") && !strings.HasPrefix(l, "===") {
			return l
		}
	}
	return "(no reason given)"
}

// report lists the skipped tests. It is false where one skipped for a tool
// that is not installed.
func report(out io.Writer, skips []skip) bool {
	ok := true
	fmt.Fprintf(out, "\nskipped tests: %d\n", len(skips))
	for _, s := range skips {
		mark := ""
		if strings.Contains(s.reason, "not installed") {
			mark, ok = " [a tool CI installs is missing]", false
		}
		fmt.Fprintf(out, "  %s %s: %s%s\n", s.pkg, s.test, s.reason, mark)
	}
	return ok
}

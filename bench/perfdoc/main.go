// Command perfdoc writes docs/performance.md from the raw output of
// bench/all.sh's steps. It reads go test's benchmark lines
// (b.ReportMetric), hyperfine's JSON, and the "metric NAME VALUE" and
// hook-cost lines the scripts and tests print. A row whose step failed or
// printed no figure says "not measured" and why, and perfdoc exits 1, so
// the page never passes off a gap as a figure.
package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
)

func main() {
	dir := flag.String("results", "", "the directory bench/all.sh wrote its steps' output to")
	out := flag.String("out", "docs/performance.md", "the page to write")
	flag.Parse()
	if *dir == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: perfdoc -results DIR [-out FILE]")
		os.Exit(2)
	}
	r, err := readResults(*dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "perfdoc: %v\n", err)
		os.Exit(2)
	}
	var page strings.Builder
	gaps := render(&page, r)
	if err := os.WriteFile(*out, []byte(page.String()), 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "perfdoc: %v\n", err)
		os.Exit(2)
	}
	if gaps > 0 {
		fmt.Fprintf(os.Stderr, "perfdoc: %d rows not measured (see %s)\n", gaps, *out)
		os.Exit(1)
	}
}

// partial reports whether the run left steps out on purpose. --quick runs
// no kernel matrix, and --only names the steps it runs.
func (r *results) partial() bool { return r.host["mode"] != "full" || r.host["only"] != "" }

// render writes the page and returns how many rows were not measured.
func render(w io.Writer, r *results) int {
	h := r.host
	fmt.Fprintf(w, "# Performance\n\n")
	fmt.Fprintf(w, "Written by `bench/all.sh` (`make bench`): do not edit by hand, run it again (root). Every row is\n"+
		"measured in this one run, its figure a ratio against the raw floor or a peer tool measured beside it\n"+
		"wherever there is one, CPU (user + system) beside wall; these machines are shared, and a lone\n"+
		"absolute time means little. The last column is the command that reproduces the row. Why a figure\n"+
		"is what it is (profiles, knock-out builds) is in [performance-notes.md](performance-notes.md), by hand\n"+
		"and dated.\n\n")
	fmt.Fprintf(w, "| run | host |\n|---|---|\n")
	fmt.Fprintf(w, "| %s, %s run, commit %s | kernel %s, %s CPUs, %s processes before, %s after |\n",
		h["date"], h["mode"], h["commit"], h["kernel"], h["cpus"], h["procs_before"], h["procs_after"])
	fmt.Fprintf(w, "| load average (1, 5, 15 min) | before %s; after %s |\n", h["load_before"], h["load_after"])
	if r.partial() {
		fmt.Fprintf(w, "\nA %s run%s: fewer rounds (`--quick`) or only some steps (`--only`); not figures to quote.\n", h["mode"], only(h["only"]))
	}
	gaps := 0
	for _, t := range tables(strings.Fields(h["sizes"]), h["mode"] == "quick") {
		fmt.Fprintf(w, "\n## %s\n\n%s\n\n", t.title, t.about)
		fmt.Fprintf(w, "| what | figure | CPU | wall | target | holds | reproduce |\n|---|---|---|---|---|---|---|\n")
		for _, row := range t.rows {
			line, ok := renderRow(r, row)
			if !ok {
				gaps++
			}
			fmt.Fprintln(w, line)
		}
	}
	gaps += renderMatrix(w, r)
	fmt.Fprintf(w, "\n## The run's steps\n\n| step | command | exit | seconds |\n|---|---|---|---|\n")
	for _, name := range r.order {
		s := r.steps[name]
		fmt.Fprintf(w, "| %s | `%s` | %d | %d |\n", s.name, s.cmd, s.rc, s.secs)
	}
	return gaps
}

// renderRow is one table line, and whether its figure was measured.
func renderRow(r *results, row row) (string, bool) {
	s, ok := r.steps[row.step]
	if !ok && r.partial() {
		return fmt.Sprintf("| %s | not run in this run | — | — | %s | — | step %s |", row.what, row.target, row.step), true
	}
	if !ok {
		return fmt.Sprintf("| %s | not measured: no step %s ran | | | %s | no | |", row.what, row.step, row.target), false
	}
	cmd := "`" + strings.ReplaceAll(s.cmd, "|", `\|`) + "`"
	f, err := row.get(s)
	if err == nil && s.rc != 0 {
		err = fmt.Errorf("the step exited %d", s.rc)
	}
	if err == nil && (math.IsNaN(f.value) || math.IsInf(f.value, 0)) {
		err = fmt.Errorf("the figure is %v", f.value)
	}
	if err != nil {
		return fmt.Sprintf("| %s | not measured: %s | | | %s | no | %s |", row.what, cell(err.Error()), row.target, cmd), false
	}
	what := row.what
	if f.procs > 0 {
		what += fmt.Sprintf(" (%.0f processes)", f.procs)
	}
	holds := "—"
	if row.target != nil && !f.refused {
		holds = "yes"
		if !row.target.holds(f.value) {
			holds = "**no**"
		}
	}
	return fmt.Sprintf("| %s | **%s** | %s | %s | %s | %s | %s |", what, f.text, f.cpu, f.wall, row.target, holds, cmd), true
}

// renderMatrix copies the kernel matrix's own table of what each Debian
// kernel loaded and each watch hook's open/close cost in its guests.
func renderMatrix(w io.Writer, r *results) int {
	fmt.Fprintf(w, "\n## The kernel matrix\n\nDebian 12's kernels booted under QEMU, as CI runs them: what each loaded, and each watch hook's open/close loop with its programs against none, counted in the guest's instructions (`TestHookCost` under `-icount`).\n\n")
	s, ok := r.steps["matrix"]
	switch {
	case !ok && r.partial():
		fmt.Fprintf(w, "Not run in this run (its guests take ten minutes or more).\n")
		return 0
	case !ok:
		fmt.Fprintf(w, "Not measured: no step matrix ran.\n")
		return 1
	}
	var table []string
	for line := range strings.Lines(s.out) {
		if strings.HasPrefix(line, "|") {
			table = append(table, strings.TrimRight(line, "\n"))
		}
	}
	if len(table) < 3 {
		fmt.Fprintf(w, "Not measured: `%s` exited %d and printed no table.\n", s.cmd, s.rc)
		return 1
	}
	fmt.Fprintf(w, "%s\n\nReproduce: `%s`.\n", strings.Join(table, "\n"), s.cmd)
	if s.rc != 0 {
		fmt.Fprintf(w, "\n**It exited %d**: a guest's tests failed or did not finish (its row says which).\n", s.rc)
		return 1
	}
	return 0
}

func only(steps string) string {
	if steps == "" {
		return ""
	}
	return " of the steps " + steps
}

// cell keeps a text on one table line.
func cell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}

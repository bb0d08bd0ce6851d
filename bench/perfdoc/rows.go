package main

import (
	"errors"
	"fmt"
)

// figure is one row's measurement, the value its target is held to, as
// printed, and the CPU and wall time beside it.
type figure struct {
	value     float64
	text      string
	cpu, wall string
	procs     float64 // the host's processes where the step says, else 0
	refused   bool    // the kernel refused what the row measures, so no target applies
}

// target is a bound a figure must keep, value <= limit or, where atLeast,
// value >= limit.
type target struct {
	limit   float64
	atLeast bool
	unit    string
}

func (t *target) String() string {
	if t == nil {
		return "—"
	}
	op := "<="
	if t.atLeast {
		op = ">="
	}
	return fmt.Sprintf("%s %s", op, format(t.limit, t.unit))
}

func (t *target) holds(v float64) bool {
	if t.atLeast {
		return v >= t.limit
	}
	return v <= t.limit
}

func atMost(v float64, unit string) *target  { return &target{limit: v, unit: unit} }
func atLeast(v float64, unit string) *target { return &target{limit: v, atLeast: true, unit: unit} }

// row is one line of a table. It says what it measures, the step that
// measures it (whose command reproduces it), how to read its figure, and its
// target.
type row struct {
	what   string
	step   string
	get    func(s *stepResult) (figure, error)
	target *target
}

// format prints a value in its unit with three significant figures.
func format(v float64, unit string) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f%s", v, sep(unit))
	case v >= 10:
		return fmt.Sprintf("%.1f%s", v, sep(unit))
	default:
		return fmt.Sprintf("%.3g%s", v, sep(unit))
	}
}

// sep puts a space before a unit word, none before x or %.
func sep(unit string) string {
	if unit == "" || unit == "x" || unit == "%" {
		return unit
	}
	return " " + unit
}

func ms(seconds float64) string { return format(seconds*1e3, "ms") }

// hyperfineRatio is command a against command b of one hyperfine run. The
// figure is the CPU ratio (user+system, hyperfine's means), and wall the
// ratio of medians.
func hyperfineRatio(what, stepName, a, b string, t *target) row {
	return row{what: what, step: stepName, target: t, get: func(s *stepResult) (figure, error) {
		x, y, err := hyperfinePair(s, a, b)
		if err != nil {
			return figure{}, err
		}
		r := x.cpu() / y.cpu()
		return figure{
			value: r, text: format(r, "x"),
			cpu:   ms(x.cpu()) + " / " + ms(y.cpu()),
			wall:  format(x.Median/y.Median, "x"),
			procs: s.metric["procs"],
		}, nil
	}}
}

func hyperfinePair(s *stepResult, a, b string) (x, y hfResult, err error) {
	var ok bool
	if x, ok = s.hf[a]; !ok {
		return x, y, fmt.Errorf("no hyperfine result %q", a)
	}
	if y, ok = s.hf[b]; !ok {
		return x, y, fmt.Errorf("no hyperfine result %q", b)
	}
	if y.cpu() <= 0 || y.Median <= 0 {
		return x, y, fmt.Errorf("hyperfine %q took no time", b)
	}
	return x, y, nil
}

// hyperfineTime is one command's mean wall time in milliseconds, its CPU beside.
func hyperfineTime(what, stepName, cmd string, t *target) row {
	return row{what: what, step: stepName, target: t, get: func(s *stepResult) (figure, error) {
		x, ok := s.hf[cmd]
		if !ok {
			return figure{}, fmt.Errorf("no hyperfine result %q", cmd)
		}
		return figure{value: x.Mean * 1e3, text: ms(x.Mean), cpu: ms(x.cpu()), wall: "median " + ms(x.Median)}, nil
	}}
}

// metrics names a benchmark's reported metrics, the figure and optionally
// the wall ratio and the two CPU times (ms) it divides.
type metrics struct {
	fig, unit  string
	scale      float64 // the figure is the metric times scale (1 where 0)
	wall       string  // a wall ratio metric
	cpuA, cpuB string  // CPU ms metrics
	cpu        string  // one CPU ms metric
	cpuNote    string  // what the CPU cell says where no metric fills it
	lo, hi     string  // metrics of the least and most of the rounds, printed after the figure
}

// benchMetric is a row read from one benchmark's metrics, or where bench is
// "" from the "metric NAME VALUE" lines of the step's script.
func benchMetric(what, stepName, bench string, m metrics, t *target) row {
	return row{what: what, step: stepName, target: t, get: func(s *stepResult) (figure, error) {
		b, ok, from := s.bench[bench], true, "Benchmark"+bench
		if bench == "" {
			b, from = s.metric, "the script's metric lines"
		} else if b, ok = s.bench[bench]; !ok {
			return figure{}, fmt.Errorf("no Benchmark%s in the output", bench)
		}
		get := func(name string) (float64, error) {
			v, ok := b[name]
			if !ok {
				return 0, fmt.Errorf("no %s in %s", name, from)
			}
			return v, nil
		}
		v, err := get(m.fig)
		if err != nil {
			return figure{}, err
		}
		if m.scale != 0 {
			v *= m.scale
		}
		f := figure{value: v, text: format(v, m.unit), cpu: "not measured apart", wall: "—", procs: b["procs"] + b["processes"]}
		if m.cpuNote != "" {
			f.cpu = m.cpuNote
		}
		if m.lo != "" {
			lo, errLo := get(m.lo)
			hi, errHi := get(m.hi)
			if err := errors.Join(errLo, errHi); err != nil {
				return figure{}, err
			}
			f.text += " [" + format(lo, m.unit) + "-" + format(hi, m.unit) + "]"
		}
		if m.wall != "" {
			w, err := get(m.wall)
			if err != nil {
				return figure{}, err
			}
			f.wall = format(w, "x")
		}
		if m.cpuA != "" {
			a, errA := get(m.cpuA)
			c, errB := get(m.cpuB)
			if err := errors.Join(errA, errB); err != nil {
				return figure{}, err
			}
			f.cpu = format(a, "ms") + " / " + format(c, "ms")
		}
		if m.cpu != "" {
			c, err := get(m.cpu)
			if err != nil {
				return figure{}, err
			}
			f.cpu = format(c, "ms")
		}
		return f, nil
	}}
}

// benchVersus is benchmark a's unit against benchmark b's. Where speedup,
// it is b/a, how many times faster a is.
func benchVersus(what, stepName, a, b, unit string, speedup bool, t *target) row {
	return row{what: what, step: stepName, target: t, get: func(s *stepResult) (figure, error) {
		x, okA := s.bench[a][unit]
		y, okB := s.bench[b][unit]
		if !okA || !okB || x <= 0 || y <= 0 {
			return figure{}, fmt.Errorf("no %s of Benchmark%s and Benchmark%s in the output", unit, a, b)
		}
		r := x / y
		if speedup {
			r = y / x
		}
		f := figure{value: r, text: format(r, "x"), cpu: "not measured apart", wall: format(x/1e6, "ms") + " / " + format(y/1e6, "ms")}
		if unit == "cpu-ms/op" {
			f.cpu, f.wall = format(x, "ms")+" / "+format(y, "ms"), format(s.bench[a]["ns/op"]/s.bench[b]["ns/op"], "x")
		}
		return f, nil
	}}
}

// metricRatio is metric a over metric b of one step.
func metricRatio(what, stepName, a, b, unit, cpu string, t *target) row {
	return row{what: what, step: stepName, target: t, get: func(s *stepResult) (figure, error) {
		x, okA := s.metric[a]
		y, okB := s.metric[b]
		if !okA || !okB || y == 0 {
			return figure{}, fmt.Errorf("no metrics %s and %s in the output", a, b)
		}
		return figure{value: x / y, text: format(x/y, unit), cpu: cpu, wall: "—"}, nil
	}}
}

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// maxOutput bounds what is read of one step's output, so a step that logs
// without end yields an error, not an out-of-memory renderer.
const maxOutput = 64 << 20

// step is one command bench/all.sh ran, with its name, the command line
// that reproduces it, its exit status and how long it took.
type step struct {
	name, cmd string
	rc, secs  int
}

// hfResult is one command of a hyperfine run (seconds).
type hfResult struct {
	Command string  `json:"command"`
	Mean    float64 `json:"mean"`
	Median  float64 `json:"median"`
	User    float64 `json:"user"`
	System  float64 `json:"system"`
}

// cpu is the command's mean user+system time.
func (h hfResult) cpu() float64 { return h.User + h.System }

// stepResult is what one step measured. It keeps benchmark metrics by
// benchmark (without its "Benchmark" prefix and GOMAXPROCS suffix) and
// unit, the median where a benchmark ran more than once. It keeps
// hyperfine results by command name, and the named metrics the scripts and
// tests print.
type stepResult struct {
	step
	out    string
	bench  map[string]map[string]float64
	hf     map[string]hfResult
	metric map[string]float64
}

// results are a whole run, the host it ran on and each step's result.
type results struct {
	host  map[string]string
	order []string
	steps map[string]*stepResult
}

// readResults reads the directory bench/all.sh wrote, with host.txt,
// steps.tsv, and each step's NAME.out and, for hyperfine steps, NAME.json.
func readResults(dir string) (*results, error) {
	r := &results{host: map[string]string{}, steps: map[string]*stepResult{}}
	host, err := readBounded(filepath.Join(dir, "host.txt"))
	if err != nil {
		return nil, err
	}
	for line := range strings.Lines(host) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			r.host[k] = v
		}
	}
	steps, err := readBounded(filepath.Join(dir, "steps.tsv"))
	if err != nil {
		return nil, err
	}
	for line := range strings.Lines(steps) {
		f := strings.Split(strings.TrimRight(line, "\n"), "\t")
		if len(f) != 4 {
			return nil, fmt.Errorf("steps.tsv: %q: want 4 fields", line)
		}
		s := &stepResult{step: step{name: f[0], cmd: f[1]}}
		if s.rc, err = strconv.Atoi(f[2]); err != nil {
			return nil, fmt.Errorf("steps.tsv: %q: %w", line, err)
		}
		if s.secs, err = strconv.Atoi(f[3]); err != nil {
			return nil, fmt.Errorf("steps.tsv: %q: %w", line, err)
		}
		if err := s.read(dir); err != nil {
			return nil, err
		}
		r.order = append(r.order, s.name)
		r.steps[s.name] = s
	}
	return r, nil
}

// read parses the step's output files.
func (s *stepResult) read(dir string) error {
	out, err := readBounded(filepath.Join(dir, s.name+".out"))
	if err != nil {
		return err
	}
	s.out = out
	s.bench, s.metric = parseOutput(out)
	js, err := readBounded(filepath.Join(dir, s.name+".json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var doc struct{ Results []hfResult }
	if err := json.Unmarshal([]byte(js), &doc); err != nil {
		return fmt.Errorf("%s.json: %w", s.name, err)
	}
	s.hf = map[string]hfResult{}
	for _, h := range doc.Results {
		s.hf[h.Command] = h
	}
	return nil
}

// readBounded reads a file of at most maxOutput bytes.
func readBounded(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxOutput+1))
	if err != nil {
		return "", err
	}
	if len(b) > maxOutput {
		return "", fmt.Errorf("%s: over %d bytes", path, maxOutput)
	}
	return string(b), nil
}

var (
	// benchLine is a go test benchmark result, a name and iterations
	// followed by value-unit pairs.
	benchLine = regexp.MustCompile(`^Benchmark(\S+?)(?:-\d+)?\s+\d+\s+(.*)$`)
	// metricLine is what the bench scripts print for bench/all.sh.
	metricLine = regexp.MustCompile(`^metric (\S+) (\S+)$`)
	// hookLine is bpf's TestHookCost's log of one hook.
	hookLine = regexp.MustCompile(`matrix: (\w+) open/close: empty programs ([0-9.]+)x, watch ([0-9.]+)x \(CPU ns per open\+close: none ([0-9.]+)`)
)

// parseOutput collects the benchmark lines, metric lines and hook-cost lines
// of one step's output. A hook's line becomes the metrics hook-H-empty,
// hook-H-watch and hook-H-bare-ns.
func parseOutput(out string) (map[string]map[string]float64, map[string]float64) {
	all := map[string]map[string][]float64{}
	metric := map[string]float64{}
	for line := range strings.Lines(out) {
		line = strings.TrimSpace(line)
		if m := benchLine.FindStringSubmatch(line); m != nil {
			f := strings.Fields(m[2])
			if all[m[1]] == nil {
				all[m[1]] = map[string][]float64{}
			}
			for i := 0; i+1 < len(f); i += 2 {
				if v, err := strconv.ParseFloat(f[i], 64); err == nil {
					all[m[1]][f[i+1]] = append(all[m[1]][f[i+1]], v)
				}
			}
		} else if m := metricLine.FindStringSubmatch(line); m != nil {
			if v, err := strconv.ParseFloat(m[2], 64); err == nil {
				metric[m[1]] = v
			}
		} else if m := hookLine.FindStringSubmatch(line); m != nil {
			for i, k := range []string{"empty", "watch", "bare-ns"} {
				v, _ := strconv.ParseFloat(m[i+2], 64)
				metric["hook-"+m[1]+"-"+k] = v
			}
		}
	}
	bench := map[string]map[string]float64{}
	for name, units := range all {
		bench[name] = map[string]float64{}
		for unit, vs := range units {
			slices.Sort(vs)
			bench[name][unit] = vs[len(vs)/2]
		}
	}
	return bench, metric
}

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/snapshot"
)

// On every NVML fixture, the memory no live process accounts for is one
// figure per GPU: ps --json's, check's zombie finding (threshold 0) and the
// textfile metric are the same number, and a GPU where it cannot be told has
// none of them.
//
// The MPS scenarios' TO hosts join it too: a server and its clients, the
// server alone, and a client gone whose memory the server's figure counts.
func TestUnaccountedAgrees(t *testing.T) {
	fixtures, err := filepath.Glob(nvmlFixture("*.json"))
	if err != nil || len(fixtures) == 0 {
		t.Fatalf("no NVML fixtures: %v", err)
	}
	type host struct{ name, procRoot, fx string }
	var hosts []host
	for _, fx := range fixtures {
		hosts = append(hosts, host{filepath.Base(fx), psFixture, fx})
	}
	mps, err := filepath.Glob(filepath.Join(scenarioRoot, "mps-*", "expected.json"))
	if err != nil || len(mps) < 3 {
		t.Fatalf("MPS scenarios: %v (%d found)", err, len(mps))
	}
	for _, exp := range mps {
		name := filepath.Base(filepath.Dir(exp))
		dir := filepath.Join(scenarioDir(name), "after")
		hosts = append(hosts, host{name, filepath.Join(dir, "proc"), filepath.Join(dir, "nvml.json")})
	}
	for _, h := range hosts {
		procRoot, fx := h.procRoot, h.fx
		t.Run(h.name, func(t *testing.T) {
			code, out, stderr := runCLI(t, "ps", "--json", "--proc-root", procRoot, "--nvml-fixture", fx)
			if code != 0 {
				t.Fatalf("ps: exit %d: %s", code, stderr)
			}
			var rep struct {
				GPUs []snapshot.GPUUse `json:"gpus"`
			}
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatal(err)
			}
			textfile := filepath.Join(t.TempDir(), "gpusnap.prom")
			_, out, stderr = runCLI(t, "check", "--json", "--zombie-threshold", "0", "--textfile", textfile,
				"--db", filepath.Join(t.TempDir(), "db"), "--proc-root", procRoot, "--nvml-fixture", fx)
			var r diff.Result
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatalf("check --json: %v: %s", err, stderr)
			}
			zombie := map[string]string{}
			for _, f := range r.Findings {
				if f.Kind == diff.KindZombieGPUMemory {
					zombie[f.GPUUUID] = strings.Join(f.Evidence, "\n")
				}
			}
			prom, err := os.ReadFile(textfile)
			if err != nil {
				t.Fatal(err)
			}
			agree := func(what, uuid string, u *uint64) {
				ev, found := zombie[uuid]
				switch {
				case u == nil && found:
					t.Errorf("%s: ps cannot tell, yet check found zombie memory", what)
				case u == nil:
				case (*u > 0) != found:
					t.Errorf("%s: ps %d unaccounted, zombie finding %v", what, *u, found)
				case found && !strings.Contains(ev, "unaccounted: +"+strconv.FormatUint(*u, 10)+" bytes"):
					t.Errorf("%s: ps %d, check's evidence:\n%s", what, *u, ev)
				}
			}
			for _, g := range rep.GPUs {
				what := "GPU " + strconv.Itoa(g.Index)
				metric := metricValue(string(prom), `gpusnap_gpu_unaccounted_memory_bytes{command="check",gpu_uuid="`+g.UUID+`"}`)
				switch {
				case g.Unaccounted == nil && metric != "":
					t.Errorf("%s: ps cannot tell, yet metric %q", what, metric)
				case g.Unaccounted != nil && metric != strconv.FormatFloat(float64(*g.Unaccounted), 'g', -1, 64):
					t.Errorf("%s: ps %d, metric %q", what, *g.Unaccounted, metric)
				}
				if len(g.MIG) == 0 {
					agree(what, g.UUID, g.Unaccounted)
				}
				// With MIG on, memory is judged per instance, as check does.
				for _, m := range g.MIG {
					agree(what+" MIG "+m.UUID, m.UUID, m.Unaccounted)
				}
			}
		})
	}
}

// metricValue is the value of the series named exactly so in a textfile, or "".
func metricValue(text, series string) string {
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return ""
}

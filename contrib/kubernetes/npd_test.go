package kubernetes

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpusnap/gpusnap/kubelet/kubelettest"
)

// npdConfig mirrors node-problem-detector's custom plugin monitor config
// (pkg/custompluginmonitor/types: CustomPluginConfig, pluginGlobalConfig,
// CustomRule, and pkg/types.Condition), field for field with its JSON names,
// so a strict decode rejects what NPD would not read.
type npdConfig struct {
	Plugin       string `json:"plugin"`
	PluginConfig struct {
		InvokeInterval    *string `json:"invoke_interval"`
		Timeout           *string `json:"timeout"`
		MaxOutputLength   *int    `json:"max_output_length"`
		Concurrency       *int    `json:"concurrency"`
		MessageChangeBase *bool   `json:"enable_message_change_based_condition_update"`
		SkipInitialStatus *bool   `json:"skip_initial_status"`
	} `json:"pluginConfig"`
	Source     string         `json:"source"`
	Conditions []npdCondition `json:"conditions"`
	Rules      []struct {
		Type           string   `json:"type"`
		Condition      string   `json:"condition"`
		Reason         string   `json:"reason"`
		Path           string   `json:"path"`
		Args           []string `json:"args"`
		Timeout        *string  `json:"timeout"`
		InvokeInterval *string  `json:"invoke_interval"`
	} `json:"rules"`
	MetricsReporting *bool `json:"metricsReporting"`
}

// npdCondition is NPD's pkg/types.Condition.
type npdCondition struct {
	Type       string    `json:"type"`
	Status     string    `json:"status"`
	Transition time.Time `json:"transition"`
	Reason     string    `json:"reason"`
	Message    string    `json:"message"`
}

// NPD's defaults and limits (pkg/custompluginmonitor/types/config.go and
// plugin/plugin.go).
const (
	npdDefaultTimeout = 5 * time.Second
	npdDefaultMaxOut  = 80
	npdMaxBuffer      = 4 << 10 // maxCustomPluginBufferBytes: stdout read past this is dropped
)

const npdConfigFile = "npd/gpusnap-plugin-monitor.json"

// loadNPDConfig decodes the config strictly and validates it as NPD's
// ApplyConfiguration and Validate do (but for the rule path, which is the
// node's), returning the global timeout and output cap.
func loadNPDConfig(t *testing.T) (*npdConfig, time.Duration, int) {
	data, err := os.ReadFile(npdConfigFile)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var c npdConfig
	if err := dec.Decode(&c); err != nil {
		t.Fatalf("%s: %v", npdConfigFile, err)
	}
	if dec.More() {
		t.Fatalf("%s: more than one JSON value", npdConfigFile)
	}
	if c.Plugin != "custom" {
		t.Errorf("plugin %q: NPD supports only \"custom\"", c.Plugin)
	}
	global := parseDur(t, c.PluginConfig.Timeout, npdDefaultTimeout)
	if global > npdDefaultTimeout {
		t.Errorf("global timeout %s is past NPD's default %s", global, npdDefaultTimeout)
	}
	if iv := parseDur(t, c.PluginConfig.InvokeInterval, 30*time.Second); iv <= global {
		t.Errorf("invoke interval %s: want it greater than zero and than the timeout %s", iv, global)
	}
	maxOut := npdDefaultMaxOut
	if p := c.PluginConfig.MaxOutputLength; p != nil {
		maxOut = *p
	}
	if maxOut != npdDefaultMaxOut {
		t.Errorf("max_output_length %d: gpusnap's line is made for NPD's default %d", maxOut, npdDefaultMaxOut)
	}
	perm, temp := 0, 0
	for i, r := range c.Rules {
		if r.Timeout != nil && parseDur(t, r.Timeout, 0) > global {
			t.Errorf("rule %d: timeout %s is past the global %s (NPD refuses the config)", i, *r.Timeout, global)
		}
		if r.InvokeInterval != nil && parseDur(t, r.InvokeInterval, 0) <= 0 {
			t.Errorf("rule %d: invoke interval must be greater than zero", i)
		}
		if r.Path != "/usr/bin/gpusnap" || !slices.Equal(r.Args, []string{"check", "--npd", "--idle"}) {
			t.Errorf("rule %d runs %s %q, want /usr/bin/gpusnap check --npd --idle", i, r.Path, r.Args)
		}
		switch r.Type {
		case "permanent":
			perm++
			if !slices.ContainsFunc(c.Conditions, func(cd npdCondition) bool { return cd.Type == r.Condition }) {
				t.Errorf("rule %d: permanent condition %q has no default condition (NPD refuses the config)", i, r.Condition)
			}
			if r.Condition != "GPUResidue" {
				t.Errorf("rule %d: condition %q, want GPUResidue", i, r.Condition)
			}
		case "temporary":
			temp++
		default:
			t.Errorf("rule %d: type %q is neither temporary nor permanent", i, r.Type)
		}
	}
	if perm != 1 || temp != 1 {
		t.Errorf("%d permanent and %d temporary rules, want one of each", perm, temp)
	}
	return &c, global, maxOut
}

func parseDur(t *testing.T, s *string, def time.Duration) time.Duration {
	if s == nil {
		return def
	}
	d, err := time.ParseDuration(*s)
	if err != nil {
		t.Errorf("duration %q: %v", *s, err)
	}
	return d
}

func TestNPDConfigDecodesStrictly(t *testing.T) { loadNPDConfig(t) }

// npdResult is what NPD makes of one run of a plugin.
type npdResult struct {
	status  string // OK, NonOK or Unknown, as NPD's Status
	message string
	line    string // the first stdout line before NPD cut it
	took    time.Duration
}

// npdTestTimeout bounds each run of the command here: a hang, not NPD's
// budget. The config's 5 s is the budget of a production node, which a host
// running other packages' tests beside this one misses; BenchmarkCheckNPD
// (bench/npd_test.go) times check against it.
const npdTestTimeout = 2 * time.Minute

// runAsNPD runs a rule's command as NPD's plugin.run does: stdout read up to
// NPD's buffer and trimmed, the message cut at max_output_length, the exit
// status 0 OK, 1 NonOK, any other Unknown. It runs under npdTestTimeout, and
// logs a run that took longer than budget, the rule's timeout, which NPD
// would have ended as Unknown.
func runAsNPD(t *testing.T, bin string, args []string, budget time.Duration, maxOut int, env []string) npdResult {
	ctx, cancel := context.WithTimeout(context.Background(), npdTestTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(io.LimitReader(stdout, npdMaxBuffer))
	_, _ = io.Copy(io.Discard, stdout)
	werr := cmd.Wait()
	r := npdResult{took: time.Since(start)}
	if ctx.Err() != nil {
		t.Fatalf("%s %q: still running after %s (a hang)", bin, args, npdTestTimeout)
	}
	if r.took > budget {
		t.Logf("%s %q took %s, past the rule's timeout %s: a loaded host (NPD would say Unknown)", bin, args, r.took.Round(time.Millisecond), budget)
	}
	var exit *exec.ExitError
	if werr != nil && !errors.As(werr, &exit) {
		t.Fatalf("%s: %v", bin, werr)
	}
	r.line, _, _ = strings.Cut(string(out), "\n")
	r.message = strings.TrimSpace(string(out))
	if len(r.message) > maxOut {
		r.message = r.message[:maxOut]
	}
	switch code := cmd.ProcessState.ExitCode(); code {
	case 0:
		r.status = "OK"
	case 1:
		r.status = "NonOK"
	default:
		r.status = "Unknown"
	}
	t.Logf("%s in %s: %q (stderr %q)", r.status, r.took.Round(time.Millisecond), r.message, stderr.String())
	return r
}

// buildGpusnap builds the command into dir.
func buildGpusnap(t *testing.T, dir string) string {
	bin := filepath.Join(dir, "gpusnap")
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go is not on PATH, to build the command: %v", err)
	}
	if out, err := exec.Command(gobin, "build", "-o", bin, "../../cmd/gpusnap").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// The gpuhost fixture's GPUs by UUID (fixtures/nvml/h100x8.json): GPU 1 is
// held and mapped by process 5000, GPU 7 is used by nothing.
var fixtureGPUs = []string{
	"GPU-3f2a1c0e-8d4b-4e5f-9a1b-2c3d4e5f6071", "GPU-4a5b6c7d-1e2f-4a3b-8c4d-5e6f7a8b9c0d",
	"GPU-5b6c7d8e-2f3a-4b4c-9d5e-6f7a8b9c0d1e", "GPU-6c7d8e9f-3a4b-4c5d-8e6f-7a8b9c0d1e2f",
	"GPU-7d8e9fa0-4b5c-4d6e-9f70-8b9c0d1e2f30", "GPU-8e9fa0b1-5c6d-4e7f-8081-9c0d1e2f3041",
	"GPU-9fa0b1c2-6d7e-4f80-9192-0d1e2f304152", "GPU-a0b1c2d3-7e8f-4091-a2a3-1e2f30415263",
}

// TestNPDRunsGpusnapCheck runs the config's rules as NPD would, on the
// gpuhost fixture with an in-test kubelet: a GPU no pod was given but a
// process holds is a problem named in one line; with every used GPU given to
// a pod the idle one is clean; a kubelet that cannot be asked is unknown.
func TestNPDRunsGpusnapCheck(t *testing.T) {
	c, global, maxOut := loadNPDConfig(t)
	dir := t.TempDir()
	bin := buildGpusnap(t, dir)
	kmsg := filepath.Join(dir, "kmsg") // an empty kernel log: nothing logged
	if err := os.WriteFile(kmsg, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	proc, err := filepath.Abs("../../fixtures/proc/gpuhost")
	if err != nil {
		t.Fatal(err)
	}
	nvml, _ := filepath.Abs("../../fixtures/nvml/h100x8.json")
	env := func(socket string) []string {
		return []string{"GPUSNAP_PROC_ROOT=" + proc, "GPUSNAP_NVML_FIXTURE=" + nvml, "GPUSNAP_KMSG=" + kmsg,
			"GPUSNAP_POD_RESOURCES=" + socket, "GPUSNAP_DB=" + filepath.Join(dir, "gpusnap.db")}
	}
	kubeletGiving := func(gpus ...string) string {
		return kubelettest.Serve(t, &kubelettest.Lister{Pods: []*podresourcesv1.PodResources{
			kubelettest.Pod("ml", "train-0", kubelettest.Container("worker", kubelettest.Devices("nvidia.com/gpu", gpus...))),
		}})
	}
	cases := []struct {
		name, socket string
		status       string
		prefix       string
	}{
		{"GPU 1 held by no pod's process", kubeletGiving(fixtureGPUs[0]), "NonOK", ""},
		{"every used GPU given", kubeletGiving(fixtureGPUs[:7]...), "OK", "no findings on GPUs " + fixtureGPUs[7] + "; not seen: "},
		{"no kubelet", filepath.Join(dir, "missing.sock"), "Unknown", "unknown: --idle: kubelet pod-resources "},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, rule := range c.Rules {
				timeout := parseDur(t, rule.Timeout, global)
				r := runAsNPD(t, bin, rule.Args, min(timeout, global), maxOut, env(tc.socket))
				if r.status != tc.status || !strings.HasPrefix(r.message, tc.prefix) {
					t.Errorf("%s rule: %s %q, want %s %q...", rule.Type, r.status, r.message, tc.status, tc.prefix)
				}
				if len(r.line) > maxOut || r.line != r.message {
					t.Errorf("%s rule: first line %q (%d bytes) was cut by NPD to %q", rule.Type, r.line, len(r.line), r.message)
				}
			}
		})
	}
	// The problem names the worst finding: a count, high, its class, the kind, GPU 1's node and the process.
	r := runAsNPD(t, bin, c.Rules[0].Args, global, maxOut, env(cases[0].socket))
	if want := " high: suspected_compromise: gpu_in_use of nvidia1 by 5000 ("; !strings.Contains(r.message, want) {
		t.Errorf("problem %q does not name process 5000 on nvidia1 (%q)", r.message, want)
	}
}

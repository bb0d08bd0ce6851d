package main

// The fleet path, end to end with Debian's own daemons (root): a real ghost on
// a loop device named nvidia0; gpusnap diff --textfile into node_exporter's
// textfile directory; node_exporter scraped over loopback; promtool's linter
// on the file; a Prometheus server that scrapes node_exporter, evaluates
// contrib/prometheus/gpusnap-rules.yml and fires the alert of the ghost's
// triage class for this node. Every daemon is stopped by its PID.

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/gpusnap/gpusnap/internal/livetest"
	"github.com/gpusnap/gpusnap/internal/testwait"
)

func TestLiveTextfileToPrometheus(t *testing.T) {
	livetest.Require(t, "losetup", "gcc", "prometheus-node-exporter", "prometheus", "promtool")
	rules, err := filepath.Abs(filepath.Join("..", "..", "contrib", "prometheus", "gpusnap-rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	textdir := filepath.Join(dir, "textfile")
	if err := os.Mkdir(textdir, 0o755); err != nil {
		t.Fatal(err)
	}
	db, prom := filepath.Join(dir, "gpusnap.db"), filepath.Join(textdir, "gpusnap-diff.prom")

	loop := livetest.NewLoop(t)
	const tenant = "live-fleet"
	flags := []string{"--db", db, "--no-nvml"}
	if code, _, stderr := gpusnap(t, append([]string{"baseline", "--tenant", tenant}, flags...)...); code != 0 {
		t.Fatalf("baseline: exit %d: %s", code, stderr)
	}
	livetest.StartGhost(t, loop, livetest.Options{})
	code, stdout, stderr := gpusnap(t, append([]string{"diff", "--tenant", tenant, "--textfile", prom}, flags...)...)
	if code != exitFindings {
		t.Fatalf("diff with the ghost alive: exit %d, want 1: %s %s", code, stdout, stderr)
	}

	text, err := os.ReadFile(prom)
	if err != nil {
		t.Fatal(err)
	}
	lint := exec.Command("promtool", "check", "metrics")
	lint.Stdin = strings.NewReader(string(text))
	if out, err := lint.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics on the textfile: %v\n%s", err, out)
	}

	// node_exporter with the textfile collector alone, on loopback.
	nodeAddr := livetest.LoopbackAddr(t)
	node := livetest.StartDaemon(t, "prometheus-node-exporter", "--web.listen-address="+nodeAddr,
		"--collector.disable-defaults", "--collector.textfile", "--collector.textfile.directory="+textdir)
	node.WaitHTTP(t, "http://"+nodeAddr+"/metrics")
	fams := scrape(t, "http://"+nodeAddr+"/metrics")
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"gpusnap_findings", map[string]string{"command": "diff", "kind": "leftover_device_mapping", "severity": "high"}, 1},
		{"gpusnap_findings", map[string]string{"command": "diff", "kind": "leftover_device_holder", "severity": "high"}, 1},
		{"gpusnap_last_run_verdict", map[string]string{"command": "diff", "verdict": "findings"}, 1},
		{"gpusnap_last_run_verdict", map[string]string{"command": "diff", "verdict": "clean"}, 0},
		{"gpusnap_build_info", map[string]string{"command": "diff"}, 1},
		{"node_textfile_scrape_error", nil, 0}, // node_exporter read the file without complaint
	} {
		if got, ok := series(fams, c.name, c.labels); !ok || got < c.want || (c.want == 0 && got != 0) {
			t.Errorf("node_exporter /metrics: %s%v = %v (present %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	if _, ok := series(fams, "gpusnap_last_run_timestamp_seconds", map[string]string{"command": "diff"}); !ok {
		t.Error("node_exporter /metrics lacks gpusnap_last_run_timestamp_seconds")
	}

	// A Prometheus server scrapes node_exporter every second and evaluates the rules.
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"+
		"rule_files:\n  - "+rules+"\n"+
		"scrape_configs:\n  - job_name: node\n    static_configs:\n      - targets: ['"+nodeAddr+"']\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	promAddr := livetest.LoopbackAddr(t)
	server := livetest.StartDaemon(t, "prometheus", "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+promAddr)
	server.WaitHTTP(t, "http://"+promAddr+"/-/ready")

	// The alert's own expression returns this node's series, and the rule fires.
	expr := `sum by (instance, command, kind) (gpusnap_findings{severity=~"high|critical",class!~"another_tenant|suspected_compromise"}) > 0`
	if !strings.Contains(mustRead(t, rules), expr) {
		t.Fatalf("%s no longer holds the expression %s: update this test", rules, expr)
	}
	// The triage class decides who is woken: a ghost the triage calls a
	// compromise pages through its own alert, which the high-finding one
	// leaves to it.
	alert := "GpusnapHighFinding"
	if _, ok := series(fams, "gpusnap_findings", map[string]string{"kind": "leftover_device_mapping", "class": "suspected_compromise"}); ok {
		alert = "GpusnapSuspectedCompromise"
	}
	var lastQuery, lastAlerts string
	if err := testwait.For(60*time.Second, "Prometheus to fire "+alert+" for "+nodeAddr, func() bool {
		lastQuery = promGet(t, "http://"+promAddr+"/api/v1/query?query="+url.QueryEscape(expr))
		lastAlerts = promGet(t, "http://"+promAddr+"/api/v1/alerts")
		high := strings.Contains(lastQuery, `"instance":"`+nodeAddr+`"`) && strings.Contains(lastQuery, `"kind":"leftover_device_mapping"`)
		return (high || alert != "GpusnapHighFinding") && firing(t, lastAlerts, alert, nodeAddr)
	}); err != nil {
		t.Fatalf("%v:\nquery: %s\nalerts: %s", err, lastQuery, lastAlerts)
	}
	t.Logf("query %s: %s", expr, lastQuery)
}

// scrape reads a /metrics page as Prometheus parses it.
func scrape(t *testing.T, u string) map[string]*dto.MetricFamily {
	t.Helper()
	return parseMetrics(t, u, strings.NewReader(promGet(t, u)))
}

// promGet is the body of a GET that must answer 200 within 5 seconds.
func promGet(t *testing.T, u string) string {
	t.Helper()
	client := http.Client{Timeout: 5 * time.Second}
	res, err := client.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 16<<20))
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %v: %s", u, res.Status, err, body)
	}
	return string(body)
}

// firing reports whether Prometheus' /api/v1/alerts answer has alert firing
// for instance.
func firing(t *testing.T, answer, alert, instance string) bool {
	t.Helper()
	var r struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(answer), &r); err != nil {
		t.Fatalf("/api/v1/alerts: %v: %s", err, answer)
	}
	for _, a := range r.Data.Alerts {
		if a.Labels["alertname"] == alert && a.Labels["instance"] == instance && a.State == "firing" {
			return true
		}
	}
	return false
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

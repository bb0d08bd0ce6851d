package slurm_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// probe sources settings.sh from a directory holding a copy of it and a
// gpusnap.conf, in sh with env as its whole environment, and returns what
// the scripts would use, one VAR=VALUE a line, then the verdict of report.
func probe(t *testing.T, conf string, env []string, report string) map[string]string {
	t.Helper()
	dir := t.TempDir()
	data, err := os.ReadFile("settings.sh")
	must(t, err)
	must(t, os.WriteFile(filepath.Join(dir, "settings.sh"), data, 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "gpusnap.conf"), []byte(conf), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "report"), []byte(report), 0o644))
	script := filepath.Join(dir, "probe.sh")
	must(t, os.WriteFile(script, []byte(`#!/bin/sh
set -u
. "${0%/*}/settings.sh"
for v in $gpusnap_settings; do eval "echo $v=\${$v-}"; done
echo "EXPORTED_DB=$(sh -c 'echo "${GPUSNAP_DB-unset}"')"
echo "VERDICT=$(verdict "${0%/*}/report")"
`), 0o755))
	cmd := exec.Command("/bin/sh", script)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("probe: %v\n%s", err, out)
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		k, v, _ := strings.Cut(line, "=")
		got[k] = v
	}
	return got
}

// TestSettingsPrecedence: each setting from the environment (set, even
// empty), else the configuration file, else its default; the binary by
// default is gpusnap on PATH.
func TestSettingsPrecedence(t *testing.T) {
	bin := t.TempDir()
	must(t, os.WriteFile(filepath.Join(bin, "gpusnap"), []byte("#!/bin/sh\n"), 0o755))
	conf := "# as /etc/default/gpusnap\nGPUSNAP_DB=/conf/gpusnap.db\nGPUSNAP_EVIDENCE_DIR=\"/conf/evidence dir\"\nGPUSNAP_ALLOW=/conf/allow\n"
	got := probe(t, conf, []string{"PATH=" + bin + ":/usr/bin:/bin", "GPUSNAP_DB=/env/gpusnap.db", "GPUSNAP_ALLOW="}, "")
	want := map[string]string{
		"GPUSNAP":               filepath.Join(bin, "gpusnap"),
		"GPUSNAP_DB":            "/env/gpusnap.db",
		"GPUSNAP_EVIDENCE_DIR":  "/conf/evidence dir",
		"GPUSNAP_ALLOW":         "",
		"GPUSNAP_SYSLOG_SOCKET": "",
		"GPUSNAP_DRAIN_REASON":  "1",
		"EXPORTED_DB":           "/env/gpusnap.db",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q (all: %q)", k, got[k], v, got)
		}
	}
	got = probe(t, "GPUSNAP=/conf/gpusnap\nGPUSNAP_DRAIN_REASON=\n", []string{"PATH=" + bin + ":/usr/bin:/bin"}, "")
	if got["GPUSNAP"] != "/conf/gpusnap" || got["GPUSNAP_EVIDENCE_DIR"] != "/var/lib/gpusnap/evidence" || got["EXPORTED_DB"] != "unset" || got["GPUSNAP_DRAIN_REASON"] != "" {
		t.Errorf("conf and defaults (the drain reason turned off in the file): %q", got)
	}
}

// TestVerdictLine: the syslog line takes the command's verdict line, not
// the warnings it printed on stderr before it; a report with none (an
// error) gives its last line.
func TestVerdictLine(t *testing.T) {
	report := "gpusnap: partial capture: 2 processes could not be read\n" +
		"gpusnap diff: 0 critical, 2 high, 0 medium, 0 low, 0 info; tenant 42; from a (t) to b (t)\n" +
		"  leftover_device_mapping: pid 7 maps /dev/nvidia0\n"
	got := probe(t, "", []string{"PATH=/usr/bin:/bin"}, report)
	if want := "gpusnap diff: 0 critical, 2 high, 0 medium, 0 low, 0 info; tenant 42; from a (t) to b (t)"; got["VERDICT"] != want {
		t.Errorf("verdict %q, want %q", got["VERDICT"], want)
	}
	got = probe(t, "", []string{"PATH=/usr/bin:/bin"}, "gpusnap: warning\ngpusnap: no baseline of tenant 42\n")
	if got["VERDICT"] != "gpusnap: no baseline of tenant 42" {
		t.Errorf("verdict of an error %q", got["VERDICT"])
	}
}

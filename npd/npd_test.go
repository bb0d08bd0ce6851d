package npd

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gpusnap/gpusnap/diff"
)

// A tenant names its process: a long comm of multibyte runes and control
// bytes stays escaped, valid UTF-8 and within NPD's 80 bytes.
func TestLineBoundsTenantText(t *testing.T) {
	comm := strings.Repeat("é\x1b[31m\u202e", 40)
	r := &diff.Result{
		Findings: []diff.Finding{
			{Kind: diff.KindLeftoverDeviceMapping, Severity: diff.High, Device: "/dev/nvidia3", Process: &diff.ProcessRef{PID: 4711, Comm: comm}},
			{Kind: diff.KindGPUInUse, Severity: diff.High, GPUUUID: "GPU-3f2a1c0e-8d4b-4e5f-9a1b-2c3d4e5f6071"},
			{Kind: diff.KindOtherDeviceMapping, Severity: diff.Low},
		},
	}
	line := Line(r, diff.AtLeast(diff.Medium))
	if len(line) > MaxLine || !utf8.ValidString(line) || strings.ContainsAny(line, "\x1b\u202e\n") {
		t.Errorf("line %q (%d bytes): want at most %d bytes of valid, escaped text", line, len(line), MaxLine)
	}
	if !strings.HasPrefix(line, "2 high: leftover_device_mapping of nvidia3 by 4711 (") || !strings.HasSuffix(line, "...") {
		t.Errorf("line %q: want the count at the worst severity, the first finding, cut with ...", line)
	}
	r.Findings = r.Findings[1:2]
	if line := Line(r, diff.AtLeast(diff.Critical)); line != "below --fail-on critical: 1 high: gpu_in_use of GPU-3f2a1c0e" {
		t.Errorf("below --fail-on: %q", line)
	}
	// The condition names the triage class before the finding: what to do.
	r.Findings[0].Triage = &diff.Triage{Class: diff.ClassAnotherTenant}
	if line := Line(r, diff.AtLeast(diff.Medium)); line != "1 high: another_tenant: gpu_in_use of GPU-3f2a1c0e" {
		t.Errorf("with a class: %q", line)
	}
}

// A check that did not see a GPU it was asked for, or saw nothing at all, is never clean.
func TestLineNeverCleanUnseen(t *testing.T) {
	r := &diff.Result{Check: &diff.CheckScope{GPUs: "0,1", Unchecked: []string{"GPU 1: NVML does not show it"}}}
	if line := Line(r, diff.AtLeast(diff.Medium)); line != "not known to be clean: GPU 1: NVML does not show it" {
		t.Errorf("unchecked GPU: %q", line)
	}
	r.Check.Unchecked = nil
	r.Notes = []string{"NVML was not read (no library): GPU memory was not checked"}
	if line := Line(r, diff.AtLeast(diff.Medium)); strings.Contains(line, "clean") {
		t.Errorf("notes: %q says clean", line)
	}
	if line := Unknown(errors.New("store:\nbroken " + strings.Repeat("x", 200))); len(line) > MaxLine || strings.Contains(line, "\n") {
		t.Errorf("unknown: %q", line)
	}
}

package diff

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// realMaps is the maps text of a python3 process, real kernel output.
func realMaps(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("testdata/python3.maps")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	return lines[:len(lines)-1] // the text ends in a newline, so drop the empty rest
}

const devLine = "7f3a40000000-7f3a40200000 rw-s 00000000 00:05 1021                       /dev/nvidia0\n"

// gnuDiff runs diff -u and drops its two header lines, which carry file times.
func gnuDiff(t *testing.T, a, b string) string {
	t.Helper()
	if _, err := exec.LookPath("diff"); err != nil {
		t.Skip("diff(1) is not installed")
	}
	dir := t.TempDir()
	pa, pb := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	if err := os.WriteFile(pa, []byte(a), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pb, []byte(b), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("diff", "-u", pa, pb).Output()
	var exit *exec.ExitError
	if err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 1) {
		t.Fatalf("diff -u: %v", err)
	}
	_, hunks, _ := strings.Cut(string(out), "\n")
	_, hunks, _ = strings.Cut(hunks, "\n")
	return hunks
}

func ours(a, b string) string {
	d := UnifiedDiff(a, b, "a", "b")
	return strings.TrimPrefix(d, "--- a\n+++ b\n")
}

func TestUnifiedDiffMatchesGNUDiff(t *testing.T) {
	lines := realMaps(t)
	join := func(ls ...[]string) string {
		var b strings.Builder
		for _, l := range ls {
			b.WriteString(strings.Join(l, ""))
		}
		return b.String()
	}
	n := len(lines)
	a := join(lines)
	cases := map[string]string{
		"device lines mapped in the middle": join(lines[:10], []string{devLine, strings.Replace(devLine, "7f3a40", "7f3a50", 2)}, lines[10:]),
		"lines unmapped at both ends":       join(lines[2 : n-2]),
		"two changes far apart":             join(lines[:5], []string{devLine}, lines[6:n-6], []string{devLine}, lines[n-6:]),
		"two changes close together":        join(lines[:5], []string{devLine}, lines[6:9], lines[10:]),
		"everything new":                    devLine,
		"last line without a newline":       strings.TrimSuffix(join(lines[:n-1]), "\n"),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			want := gnuDiff(t, a, b)
			if got := ours(a, b); got != want {
				t.Errorf("ours:\n%s\ndiff -u:\n%s", got, want)
			}
		})
	}
	if d := UnifiedDiff(a, a, "a", "b"); d != "" {
		t.Errorf("equal texts give %q, want none", d)
	}
	if got, want := ours("", a), gnuDiff(t, "", a); got != want {
		t.Errorf("from nothing: ours:\n%s\ndiff -u:\n%s", got, want)
	}
}

// applyHunks rebuilds the new text from the old one and a unified diff. A
// diff that rebuilds its target is correct, whichever of several equally
// short diffs it chose.
func applyHunks(t *testing.T, a, d string) string {
	t.Helper()
	old := strings.SplitAfter(a, "\n")
	var out strings.Builder
	at := 0 // next old line to copy
	for _, line := range strings.SplitAfter(d, "\n")[2:] {
		switch {
		case line == "":
		case strings.HasPrefix(line, "@@ -"):
			spec, _, _ := strings.Cut(strings.TrimPrefix(line, "@@ -"), " ")
			startText, countText, found := strings.Cut(spec, ",")
			start, _ := strconv.Atoi(startText)
			if !found || countText != "0" {
				start-- // 1-based, and a zero-length side names the line before
			}
			for ; at < start; at++ {
				out.WriteString(old[at])
			}
		case line[0] == ' ':
			out.WriteString(line[1:])
			at++
		case line[0] == '-':
			at++
		case line[0] == '+':
			out.WriteString(line[1:])
		default:
			t.Fatalf("bad diff line %q", line)
		}
	}
	for ; at < len(old); at++ {
		out.WriteString(old[at])
	}
	return out.String()
}

func TestUnifiedDiffRebuildsRandomEdits(t *testing.T) {
	lines := realMaps(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		var a, b bytes.Buffer
		for _, l := range lines {
			a.WriteString(l)
			switch rng.IntN(10) {
			case 0: // unmapped
			case 1:
				b.WriteString(devLine)
			case 2:
				b.WriteString(l)
				b.WriteString(devLine)
			default:
				b.WriteString(l)
			}
		}
		d := UnifiedDiff(a.String(), b.String(), "a", "b")
		if got := applyHunks(t, a.String(), d); got != b.String() {
			t.Fatalf("case %d: the diff does not rebuild the new text:\n%s", i, d)
		}
	}
}

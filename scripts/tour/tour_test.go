// Package tour holds the test of the README's tour: scripts/tour.sh runs it
// as written, and every line the README shows must stand in its output.
package tour

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/internal/livetest"
)

// What differs from run to run, in the order it is replaced: the Python a
// host runs, snapshot ids, times, digests, the host's name, then numbers.
var varying = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`/\S*/python3\.\d+`), "PYTHON"},
	{regexp.MustCompile(`\d{8}-\d{6}\.\d{6}-[0-9a-f]{6}`), "ID"},
	{regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`), "TIME"},
	{regexp.MustCompile(`[0-9a-f]{64}`), "DIGEST"},
	{regexp.MustCompile(`, host [^,]+,`), ", host HOST,"},
	{regexp.MustCompile(`\d+`), "N"},
}

// normal is a line with what varies replaced and its spaces collapsed (a
// table's columns are as wide as their values).
func normal(line string) string {
	for _, v := range varying {
		line = v.re.ReplaceAllString(line, v.with)
	}
	return strings.Join(strings.Fields(line), " ")
}

// readmeTour is the README's tour block, less its "..." lines.
func readmeTour(t *testing.T) []string {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), "## A tour\n")
	_, rest, ok2 := strings.Cut(rest, "```\n")
	block, _, ok3 := strings.Cut(rest, "```\n")
	if !ok || !ok2 || !ok3 {
		t.Fatal("README.md: no tour block")
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSuffix(block, "\n"), "\n") {
		if l != "..." {
			lines = append(lines, l)
		}
	}
	return lines
}

// matches reports whether the README's line stands for the output's: the
// same once normalized, or, for a line the report cut ("…"), the same up to
// the shorter cut, since the tour's directory is not the README's.
func matches(readme, out string) bool {
	r, o := normal(readme), normal(out)
	if r == o {
		return true
	}
	if !strings.HasSuffix(r, "…") && !strings.HasSuffix(o, "…") {
		return false
	}
	r, o = strings.TrimSuffix(r, "…"), strings.TrimSuffix(o, "…")
	return strings.HasPrefix(r, o) || strings.HasPrefix(o, r)
}

// TestReadmeTour runs scripts/tour.sh on a fresh build and finds every line
// of the README's tour in its output, in order (the output may hold more: a
// host's notes). The exit status it shows is the diff's, 1.
func TestReadmeTour(t *testing.T) {
	livetest.Require(t, "losetup", "unshare", "python3", "mknod", "truncate")
	// The tour's namespace hides other tests' processes, not the kernel log.
	// A record forged there in its window would be one more finding, and the
	// lead line the README shows would name it too.
	livetest.ShareKernelLog(t)
	bin := t.TempDir() + "/gpusnap"
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/gpusnap").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dir := t.TempDir() + "/tour"
	cmd := exec.Command("../tour.sh")
	cmd.Env = append(os.Environ(), "GPUSNAP="+bin, "TOUR_DIR="+dir)
	raw, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("tour.sh: %v\n%s", err, raw)
	}
	out := strings.Split(strings.ReplaceAll(string(raw), dir, "/tmp/tour"), "\n")
	want := readmeTour(t)
	i := 0
	for _, w := range want {
		for i < len(out) && !matches(w, out[i]) {
			i++
		}
		if i == len(out) {
			t.Fatalf("README's tour line %q is not in the tour's output (in order):\n%s", w, raw)
		}
		i++
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("tour.sh left %s behind", dir)
	}
}

package render

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/internal/testenv"
)

// chromium runs Debian's headless chromium on a local file with the given
// extra flags, isolated from the network and from any profile, and returns
// stdout and the log lines of the page's console.
func chromium(t *testing.T, page string, flags ...string) (stdout string, console []string) {
	t.Helper()
	testenv.Tools(t, "chromium") // else the HTML report is not checked in a browser
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := append([]string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir(), "--enable-logging=stderr", "--v=0",
	}, flags...)
	cmd := exec.CommandContext(ctx, bin, append(args, "file://"+page)...)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, errOut.String())
	}
	for _, line := range strings.Split(errOut.String(), "\n") {
		if strings.Contains(line, ":CONSOLE") {
			console = append(console, line)
		}
	}
	return out.String(), console
}

// testOutDir is where files for a person to look at go: $GPUSNAP_TEST_OUT,
// else a fixed directory under the system's temporary directory.
func testOutDir(t *testing.T) string {
	dir := os.Getenv("GPUSNAP_TEST_OUT")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "gpusnap-test-out")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestReportHTMLInChromium(t *testing.T) {
	dir := t.TempDir()
	// The control: a page that breaks its own policy must log console
	// errors, or this test could not see ours.
	bad := filepath.Join(dir, "bad.html")
	os.WriteFile(bad, []byte(`<!DOCTYPE html><meta http-equiv="Content-Security-Policy" content="default-src 'none'"><style>p{color:red}</style><img src="x.png"><p>x`), 0o644)
	if _, console := chromium(t, bad, "--dump-dom"); len(console) < 2 {
		t.Fatalf("chromium logged %d console lines for a page that violates its policy twice: the console check is blind", len(console))
	}

	page := filepath.Join(dir, "report.html")
	if err := os.WriteFile(page, pages(t, testInput()).HTML, 0o644); err != nil {
		t.Fatal(err)
	}
	dom, console := chromium(t, page, "--dump-dom")
	if len(console) > 0 {
		t.Errorf("the report logged console messages:\n%s", strings.Join(console, "\n"))
	}
	rows := regexp.MustCompile(`<tr class="finding" data-kind="([a-z_]+)" data-severity="([a-z]+)">`).FindAllStringSubmatch(dom, -1)
	var got []string
	for _, r := range rows {
		got = append(got, r[2]+" "+r[1])
	}
	want := []string{"high unexpected_gpu_process", "high leftover_device_mapping", "high leftover_device_holder", "medium leftover_device_mapping"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("finding rows in the DOM: %q, want %q", got, want)
	}
	for _, s := range []string{`id="verdict">4 findings: 3 high, 1 medium.`, `id="finding-4"`, `<li>Note: NVML was not read at FROM: library not found</li>`, `id="process-666@990000"`, `&lt;script&gt;alert(1)&lt;/script&gt;`, `<span class="add">+7f0000000000-7f0000200000 rw-s`} {
		if !strings.Contains(dom, s) {
			t.Errorf("the DOM lacks %s", s)
		}
	}
	if n := strings.Count(strings.ToLower(dom), "<script"); n != 0 {
		t.Errorf("the DOM holds %d script elements", n)
	}

	screenshot(t, page, "bundle-report.png", 2400)
}

// screenshot has Chromium draw page, 1280 pixels wide and height high, into
// name in the tests' output directory, and fails on an empty picture.
func screenshot(t *testing.T, page, name string, height int) {
	t.Helper()
	shot := filepath.Join(testOutDir(t), name)
	os.Remove(shot)
	chromium(t, page, "--screenshot="+shot, fmt.Sprintf("--window-size=1280,%d", height), "--hide-scrollbars")
	if fi, err := os.Stat(shot); err != nil || fi.Size() < 10_000 {
		t.Fatalf("no screenshot: %v", err)
	}
	t.Logf("screenshot of the report: %s", shot)
}

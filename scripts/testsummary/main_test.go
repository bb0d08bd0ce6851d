package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A stream in test2json's format: the failed test's output, the package
// lines and go test's own text are printed, a passing test's output is not,
// and each skip is listed with its reason; a skip for a tool not installed
// fails the run.
func TestSummarize(t *testing.T) {
	in := strings.Join([]string{
		`{"Action":"run","Package":"p","Test":"TestA"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"    a_test.go:9: chatty\n"}`,
		`{"Action":"pass","Package":"p","Test":"TestA"}`,
		`{"Action":"output","Package":"p","Test":"TestB","Output":"    b_test.go:3: want 1, got 2\n"}`,
		`{"Action":"output","Package":"p","Test":"TestB","Output":"--- FAIL: TestB (0.00s)\n"}`,
		`{"Action":"fail","Package":"p","Test":"TestB"}`,
		`{"Action":"output","Package":"p","Test":"TestC","Output":"    c_test.go:5: needs root\n"}`,
		`{"Action":"output","Package":"p","Test":"TestC","Output":"--- SKIP: TestC (0.00s)\n"}`,
		`{"Action":"skip","Package":"p","Test":"TestC"}`,
		`{"Action":"output","Package":"p","Output":"FAIL\tp\t0.01s\n"}`,
		`# p [build failed]`,
	}, "\n")
	var out strings.Builder
	skips, err := summarize(strings.NewReader(in), &out)
	if err != nil {
		t.Fatal(err)
	}
	got := out.String()
	if strings.Contains(got, "chatty") || !strings.Contains(got, "want 1, got 2") || !strings.Contains(got, "FAIL\tp") || !strings.Contains(got, "build failed") {
		t.Errorf("output:\n%s", got)
	}
	if len(skips) != 1 || skips[0].reason != "c_test.go:5: needs root" {
		t.Fatalf("skips %+v", skips)
	}
	out.Reset()
	if !report(&out, skips) || !strings.Contains(out.String(), "p TestC: c_test.go:5: needs root") {
		t.Errorf("report: %s", out.String())
	}
	if report(&out, []skip{{"p", "TestD", "x_test.go:1: chromium is not installed"}}) {
		t.Error("a skip for a tool not installed passed")
	}
}

// A real go test -json stream (of the test above) is read whole: its
// package line printed, no skip invented.
func TestSummarizeRealStream(t *testing.T) {
	cmd := exec.Command("go", "test", "-json", "-run", "^TestSummarize$", ".")
	data, err := cmd.Output()
	if err != nil {
		t.Fatalf("go test -json: %v", err)
	}
	var out strings.Builder
	skips, err := summarize(strings.NewReader(string(data)), &out)
	if err != nil || len(skips) != 0 || !strings.Contains(out.String(), "ok  \tgithub.com/gpusnap/gpusnap/scripts/testsummary") {
		t.Errorf("skips %v, err %v, output:\n%s", skips, err, out.String())
	}
}

// A test binary that crashes (here a panic off the test's goroutine) fails
// its package but never the running test: that test's output, the panic,
// is printed all the same, and a passing test's is not.
func TestSummarizeCrash(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module crash\n\ngo 1.26\n",
		"crash_test.go": `package crash

import (
	"testing"
	"time"
)

func TestFine(t *testing.T) { t.Log("chatty") }

func TestCrash(t *testing.T) {
	t.Log("before the crash")
	go func() { panic("boom off the test's goroutine") }()
	time.Sleep(10 * time.Second) // workload: the panic ends the binary first
}
`,
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "test", "-json", ".")
	cmd.Dir = dir
	data, err := cmd.Output()
	if err == nil {
		t.Fatalf("go test of a crashing test passed:\n%s", data)
	}
	var out strings.Builder
	if _, err := summarize(strings.NewReader(string(data)), &out); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{"crash TestCrash, which never ended", "before the crash", "panic: boom off the test's goroutine", "FAIL\tcrash"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "chatty") {
		t.Errorf("a passing test's output printed:\n%s", got)
	}
}

package main

import (
	"os/exec"
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

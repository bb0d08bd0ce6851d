package main

import (
	"flag"
	"os"
	"regexp"
	"testing"
)

// updateGolden rewrites the golden files of the text reports from this run:
// go test ./cmd/gpusnap -run 'TestDiffScenarios|TestCheckScenarios' -update
var updateGolden = flag.Bool("update", false, "rewrite the golden text reports")

// volatile are the parts of a report that differ from run to run: snapshot
// ids and capture times.
var volatile = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`\b\d{8}-\d{6}\.\d{6}-[0-9a-f]{6}\b`), "SNAPSHOT-ID"},
	{regexp.MustCompile(`\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`), "TIME"},
}

// normalize replaces what differs from run to run in a report.
func normalize(s string) string {
	for _, v := range volatile {
		s = v.re.ReplaceAllString(s, v.with)
	}
	return s
}

// checkGolden compares a text report, normalized, with the golden file path,
// or writes it there under -update.
func checkGolden(t *testing.T, path, got string) {
	t.Helper()
	got = normalize(got)
	if *updateGolden {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (write it with -update)", err)
	}
	if got != string(want) {
		t.Errorf("text report differs from %s (-update rewrites it):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

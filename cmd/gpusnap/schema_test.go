package main

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/internal/schematest"
	"github.com/gpusnap/gpusnap/internal/testenv"
)

// TestJSONSchemas runs every command that prints JSON on a scenario's host
// and checks each output against its schema in docs/schema with Debian's
// python3-jsonschema (TestDiffScenarios checks every scenario's diff,
// TestWatchReplaysSeriesAndDiffShapesIt events --json and a diff with watch's
// samples).
func TestJSONSchemas(t *testing.T) {
	testenv.NotShort(t, "runs python3-jsonschema")
	const name = "cuda-ghost-keeps-context"
	dir := t.TempDir()
	db := filepath.Join(dir, "gpusnap.db")
	before, after := sideArgs(db, name, "before"), sideArgs(db, name, "after")
	out := func(want int, args ...string) []byte {
		t.Helper()
		code, stdout, stderr := gpusnap(t, args...)
		if code != want {
			t.Fatalf("%q: exit %d, want %d: %s", args, code, want, stderr)
		}
		return []byte(stdout)
	}
	out(0, append([]string{"baseline", "--tenant", name}, before...)...)
	snap := out(0, append([]string{"snapshot", "--json", "--tenant", name, "--label", "during"}, after...)...)
	schematest.Validate(t, "snapshot", snap)
	_, list, _ := gpusnap(t, "list", "--db", db)
	id := strings.Fields(strings.Split(strings.TrimSpace(list), "\n")[2])[0]
	schematest.Validate(t, "snapshot", out(0, "show", "--json", id, "--db", db))
	schematest.Validate(t, "list", out(0, "list", "--json", "--db", db))
	bundle := filepath.Join(dir, "b.tar.gz")
	schematest.Validate(t, "diff", out(1, append([]string{"diff", "--json", "--tenant", name, "--bundle", bundle}, after...)...))
	schematest.Validate(t, "findings", bundleMember(t, bundle, "data/findings.json"))
	schematest.Validate(t, "check", out(1, append([]string{"check", "--json", "--gpus", "0"}, after...)...))
	schematest.Validate(t, "ps", out(0, append([]string{"ps", "--json"}, after[2:]...)...))

	// ps --interval --json: each line a sample.
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	var lines, errb strings.Builder
	if code := run(ctx, append([]string{"gpusnap", "ps", "--json", "--interval", "100ms"}, after[2:]...), &lines, &errb); code != 0 {
		t.Fatalf("ps --interval: exit %d: %s", code, errb.String())
	}
	var samples [][]byte
	sc := bufio.NewScanner(strings.NewReader(lines.String()))
	sc.Buffer(nil, 1<<22)
	for sc.Scan() {
		samples = append(samples, append([]byte(nil), sc.Bytes()...))
	}
	if len(samples) < 2 {
		t.Fatalf("%d samples of ps --interval", len(samples))
	}
	schematest.Validate(t, "ps", samples...)
}

// bundleMember is the file name of the bundle at path.
func bundleMember(t *testing.T, path, name string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("%s has no %s: %v", path, name, err)
		}
		if h.Name == name || strings.HasSuffix(h.Name, "/"+name) {
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return data
		}
	}
}

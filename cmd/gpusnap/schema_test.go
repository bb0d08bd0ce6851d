package main

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/internal/schematest"
	"github.com/gpusnap/gpusnap/internal/testenv"
	"github.com/gpusnap/gpusnap/snapshot"
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
	// reap's plans (a dry run: --yes acts on the live host alone, whose
	// reaps the reap package's live tests validate).
	schematest.Validate(t, "reap", out(1, append([]string{"reap", "--json", "--gpus", "0"}, after...)...),
		out(1, append([]string{"reap", "--json", "--tenant", name}, after...)...))

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

// Every field a --json output may carry is in its schema: a field the
// schema does not name is refused by a validator, so a field added to a
// type but not to its schema fails here before it fails a user's check.
func TestSchemasNameEveryField(t *testing.T) {
	for name, root := range map[string]reflect.Type{
		"snapshot": reflect.TypeFor[snapshot.Snapshot](),
		"diff":     reflect.TypeFor[diff.Result](),
		"check":    reflect.TypeFor[diff.Result](),
		"findings": reflect.TypeFor[diff.Result](),
		"ps":       reflect.TypeFor[psReport](),
		"events":   reflect.TypeFor[eventlog.Event](),
		"reap":     reflect.TypeFor[reapReport](),
	} {
		data, err := os.ReadFile(filepath.Join("..", "..", "docs", "schema", name+".schema.json"))
		if err != nil {
			t.Fatal(err)
		}
		var schema struct {
			Defs map[string]struct {
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"$defs"`
		}
		if err := json.Unmarshal(data, &schema); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		seen := map[reflect.Type]bool{}
		var walk func(reflect.Type)
		walk = func(typ reflect.Type) {
			for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice || typ.Kind() == reflect.Array || typ.Kind() == reflect.Map {
				typ = typ.Elem()
			}
			if typ.Kind() != reflect.Struct || seen[typ] || typ.PkgPath() == "time" {
				return
			}
			seen[typ] = true
			if _, custom := reflect.New(typ).Interface().(json.Marshaler); custom {
				return
			}
			def, ok := schema.Defs[typ.Name()]
			for _, f := range jsonFields(typ) {
				if !ok {
					t.Errorf("%s.schema.json: no $defs/%s for %s (field %s)", name, typ.Name(), typ, f.name)
					break
				}
				if _, named := def.Properties[f.name]; !named {
					t.Errorf("%s.schema.json: $defs/%s lacks %q (%s)", name, typ.Name(), f.name, f.typ)
				}
			}
			for _, f := range jsonFields(typ) {
				walk(f.typ)
			}
		}
		walk(root)
	}
}

type jsonField struct {
	name string
	typ  reflect.Type
}

// jsonFields are the fields encoding/json writes of a struct type, those of
// embedded structs among them.
func jsonFields(typ reflect.Type) []jsonField {
	var out []jsonField
	for i := range typ.NumField() {
		f := typ.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || !f.IsExported() && !f.Anonymous {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			et := f.Type
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				out = append(out, jsonFields(et)...)
				continue
			}
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, jsonField{name, f.Type})
	}
	return out
}

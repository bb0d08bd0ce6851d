// Package schematest checks gpusnap's JSON against the JSON Schemas in
// docs/schema with Debian's python3-jsonschema. That validator is not
// gpusnap's, so a field renamed in Go and not in the schema fails a test.
package schematest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/gpusnap/gpusnap/internal/testenv"
)

// python is Debian's interpreter, whose python3-jsonschema .ci/run installs.
const python = "/usr/bin/python3"

// validator validates each document (argv[2:]) against the schema
// (argv[1]), then renames each top-level field of each document (of its
// first element, for an array) and wants the schema to refuse it. A schema
// that let a renamed field through would not pin the output down.
const validator = `
import json, sys
import jsonschema
schema = json.load(open(sys.argv[1]))
cls = jsonschema.validators.validator_for(schema)
cls.check_schema(schema)
v = cls(schema)
bad = 0
for path in sys.argv[2:]:
    doc = json.load(open(path))
    for e in v.iter_errors(doc):
        print("%s: %s at /%s" % (path, e.message[:300], "/".join(map(str, e.absolute_path))))
        bad += 1
    obj = doc[0] if isinstance(doc, list) and doc else doc
    if not isinstance(obj, dict):
        continue
    for key in list(obj):
        renamed = dict((key + "_renamed" if k == key else k, val) for k, val in obj.items())
        mutated = [renamed] + doc[1:] if isinstance(doc, list) else renamed
        if v.is_valid(mutated):
            print("%s: the schema accepts field %r renamed" % (path, key))
            bad += 1
sys.exit(1 if bad else 0)
`

// Validate checks each document against docs/schema/NAME.schema.json. It
// skips under -short and where the validator is missing.
func Validate(t testing.TB, name string, docs ...[]byte) {
	t.Helper()
	testenv.Tools(t, python)
	if exec.Command(python, "-c", "import jsonschema").Run() != nil {
		testenv.Missing(t, "python3-jsonschema")
	}
	schema, err := schemaPath(name)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	args := []string{"-c", validator, schema}
	for i, d := range docs {
		path := filepath.Join(dir, fmt.Sprintf("%s-%d.json", name, i))
		if err := os.WriteFile(path, d, 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, path)
	}
	if out, err := exec.Command(python, args...).CombinedOutput(); err != nil {
		t.Errorf("%s.schema.json: %v\n%s", name, err, out)
	}
}

// schemaPath finds docs/schema/NAME.schema.json above the test's directory.
func schemaPath(name string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "docs", "schema", name+".schema.json"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the test's directory")
		}
		dir = parent
	}
}

package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/capture"
	"github.com/gpusnap/gpusnap/internal/scenariodir"
	"github.com/gpusnap/gpusnap/render"
	"github.com/gpusnap/gpusnap/snapshot"
)

// processWriter is the JSON writer of today's Process stored as today's
// descriptor.
func processWriter(t testing.TB) (*processCodec, jsonWriter) {
	t.Helper()
	codec, err := codecOfProcess()
	if err != nil {
		t.Fatal(err)
	}
	d, err := describe(processType, 0)
	if err != nil {
		t.Fatal(err)
	}
	w, err := compileJSONWriter(d, processType)
	if err != nil {
		t.Fatalf("today's Process has no JSON writer: %v", err)
	}
	return codec, w
}

// checkWriter checks that the writer's JSON of p's binary record is byte
// for byte what the slow path makes of it, json.Marshal of the record
// decoded, or that both fail.
func checkWriter(t *testing.T, codec *processCodec, w jsonWriter, p *snapshot.Process) {
	t.Helper()
	bin := codec.encode(p)
	var back snapshot.Process
	if err := decodeBinary(codec.dec, bin, &back); err != nil {
		t.Fatalf("pid %d: %v", p.PID, err)
	}
	want, wantErr := json.Marshal(&back)
	got, err := writeJSON(w, bin, nil)
	if (err != nil) != (wantErr != nil) || (err == nil && !bytes.Equal(got, want)) {
		i := 0
		for i < min(len(got), len(want)) && got[i] == want[i] {
			i++
		}
		t.Fatalf("pid %d: the writer differs from json.Marshal at byte %d (%v, %v):\n got %q\nwant %q",
			p.PID, i, err, wantErr, got[max(i-60, 0):min(i+60, len(got))], want[max(i-60, 0):min(i+60, len(want))])
	}
}

// Every process of every side of every scenario, captured from its proc
// root, writes the JSON that json.Marshal does. And each side stored, as show
// --json prints it from GetJSON's parts made on 1, 2 and 5 CPUs, is byte for
// byte json.Marshal of the capture indented by json.Indent.
func TestJSONWriterOnScenarios(t *testing.T) {
	codec, w := processWriter(t)
	s, _ := openTemp(t)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	root := filepath.Join("..", "fixtures", "scenarios")
	dirs, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	procs := 0
	for _, e := range dirs {
		if !e.IsDir() || e.Name() == "base" {
			continue
		}
		dir := scenariodir.ForTest(t, filepath.Join(root, e.Name()))
		for _, side := range []string{"before", "during", "after"} {
			proc := filepath.Join(dir, side, "proc")
			if _, err := os.Stat(proc); err != nil {
				continue
			}
			snap, err := capture.Capture(t.Context(), capture.Options{ProcRoot: proc})
			if err != nil {
				t.Fatalf("%s %s: %v", e.Name(), side, err)
			}
			for i := range snap.Processes {
				checkWriter(t, codec, w, &snap.Processes[i])
				procs++
			}
			checkShowJSON(t, s, snap)
		}
	}
	if procs < 100 {
		t.Fatalf("only %d processes in the scenarios", procs)
	}
	t.Logf("%d processes", procs)
}

// checkShowJSON stores snap and checks that show --json's parts, printed,
// are json.Marshal of snap indented by json.Indent, however many CPUs make
// them.
func checkShowJSON(t *testing.T, s *Store, snap *snapshot.Snapshot) {
	t.Helper()
	if err := s.Put(snap); err != nil {
		t.Fatal(err)
	}
	compact, err := json.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if err := json.Indent(&want, compact, "", "  "); err != nil {
		t.Fatal(err)
	}
	want.WriteByte('\n')
	for _, cpus := range []int{1, 2, 5} {
		runtime.GOMAXPROCS(cpus)
		head, procs, err := s.GetJSON(snap.ID, render.AppendProcessJSON)
		if err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		if err := render.StoredSnapshotJSON(&got, head, procs); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want.Bytes()) {
			t.Fatalf("%s on %d CPUs (%d parts): show --json prints\n%s\njson.Indent\n%s", snap.ID, cpus, len(procs), got.Bytes(), want.Bytes())
		}
	}
}

// FuzzJSONWriter writes arbitrary payloads as records of today's Process.
// Where the writer gives JSON, the payload decodes and json.Marshal of it
// is the same bytes: the writer never says what the slow path would not.
// It may refuse what decodes (keys out of order), and the slow path then
// runs. The seeds are real records and cuts of them.
func FuzzJSONWriter(f *testing.F) {
	codec, w := processWriter(f)
	full := codec.encode(fullProcess(f))
	f.Add(full)
	f.Add(full[:len(full)/2])
	for _, p := range fakeSnapshot(time.Now(), "", "", 51).Processes[49:] {
		f.Add(codec.encode(&p))
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, payload []byte) {
		got, err := writeJSON(w, payload, nil)
		if err != nil {
			return
		}
		var p snapshot.Process
		if err := decodeBinary(codec.dec, payload, &p); err != nil {
			t.Fatalf("the writer gave JSON of a payload that does not decode (%v)", err)
		}
		want, err := json.Marshal(&p)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("the writer gave\n%s\njson.Marshal (%v)\n%s", got, err, want)
		}
	})
}

// A record whose written JSON is not the JSON it was stored with, or that
// the writer refuses, is decoded and marshalled instead: the writer can make
// show --json faster, never different.
func TestJSONWriterFallsBack(t *testing.T) {
	codec, _ := processWriter(t)
	p := fullProcess(t)
	want, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	wrong := func(r *reader, out []byte) ([]byte, bool, bool, error) {
		r.pos = len(r.b)
		return append(out, "{}"...), false, false, nil
	}
	refuse := func(_ *reader, out []byte) ([]byte, bool, bool, error) { return out, false, false, errNoWriter }
	for name, w := range map[string]jsonWriter{"wrong": wrong, "refused": refuse} {
		rec := storedRec{sum: sha256.Sum256(want), bin: codec.encode(p), dec: codec.dec, js: w}
		if got, err := rec.appendJSON(nil); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: appendJSON gives (%v)\n%s\nwant\n%s", name, err, got, want)
		}
	}
}

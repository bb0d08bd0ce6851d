package bundle

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/snapshot"
)

func TestRoundTrip(t *testing.T) {
	in := testInput()
	in.SignKey = testKey()
	b := writeBundle(t, in)

	rep := verifyBytes(t, b, testKey().Public().(ed25519.PublicKey))
	if !rep.Intact() {
		t.Fatalf("fresh bundle not intact: %+v", rep.Problems)
	}
	if !rep.Signature.Valid || !rep.Signature.Trusted {
		t.Errorf("signature = %+v, want valid and trusted", rep.Signature)
	}
	var names []string
	for _, e := range rep.Entries {
		if e.Status != StatusOK {
			t.Errorf("%s: status %s", e.Name, e.Status)
		}
		names = append(names, e.Name)
	}
	want := []string{
		"bag-info.txt", "bagit.txt",
		"data/", "data/after.json", "data/before.json", "data/findings.json",
		"data/maps/", "data/maps/4243@987654.diff", "data/maps/666@990000.diff",
		"data/raw/", "data/raw/4243@987654/", "data/raw/4243@987654/cgroup", "data/raw/4243@987654/cmdline", "data/raw/4243@987654/maps", "data/raw/4243@987654/status",
		"data/raw/666@990000/", "data/raw/666@990000/cgroup", "data/raw/666@990000/cmdline", "data/raw/666@990000/maps", "data/raw/666@990000/status",
		"data/report.html", "data/report.md",
		"manifest-sha256.txt", "statement.dsse.json", "tagmanifest-sha256.txt",
	}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("entries:\n got %q\nwant %q", names, want)
	}
	if rep.Bag != "gpusnap-"+in.After.ID {
		t.Errorf("bag directory %q", rep.Bag)
	}

	m := rep.Predicate
	if m.GpusnapVersion != "1.0.0-test" || m.Tenant != "job-4242" || m.UID != 0 ||
		m.Host != (HostFacts{Hostname: "gpu-node-7", KernelRelease: "6.1.0-28-amd64", BootID: "b00710-1d", DriverVersion: "550.54.15"}) ||
		m.Before.ID != in.Before.ID || m.After.ID != in.After.ID || !m.After.CaptureStart.Equal(in.After.Host.CaptureStart) ||
		m.TenantStart == nil || !m.TenantStart.Equal(in.TenantStart) || m.Summary.Total != 4 ||
		m.FindingsSHA256 != sha256Hex(memberData(t, b, "data/findings.json")) {
		t.Errorf("predicate = %+v", m)
	}

	// The snapshots and the result come back as they went in.
	var before, after snapshot.Snapshot
	var res diff.Result
	for name, v := range map[string]any{"data/before.json": &before, "data/after.json": &after, "data/findings.json": &res} {
		if err := json.Unmarshal(memberData(t, b, name), v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if before.ID != in.Before.ID || len(after.Processes) != 3 || after.Processes[1].Raw.Maps != in.After.Processes[1].Raw.Maps {
		t.Errorf("snapshots did not round-trip")
	}
	if len(res.Findings) != 4 || res.Findings[1].InheritedFrom != in.Result.Findings[1].InheritedFrom || res.MapsDiffs["666@990000"] != in.Result.MapsDiffs["666@990000"] {
		t.Errorf("findings did not round-trip: %+v", res)
	}
	// raw/ keeps the kernel's bytes, even those JSON cannot carry.
	if got := memberData(t, b, "data/raw/666@990000/cmdline"); string(got) != in.After.Processes[2].Raw.Cmdline {
		t.Errorf("raw cmdline = %q", got)
	}
	// A raw text that is not UTF-8 keeps its bytes, in raw/ and through after.json.
	cgroup := in.After.Processes[2].Raw.Cgroup
	if !strings.Contains(cgroup, "\xff") || string(memberData(t, b, "data/raw/666@990000/cgroup")) != cgroup || after.Processes[2].Raw.Cgroup != cgroup {
		t.Errorf("raw cgroup not byte for byte: %q, after.json %q", memberData(t, b, "data/raw/666@990000/cgroup"), after.Processes[2].Raw.Cgroup)
	}
	if got := memberData(t, b, "data/maps/4243@987654.diff"); string(got) != in.Result.MapsDiffs["4243@987654"] {
		t.Errorf("maps diff = %q", got)
	}
}

func TestArchiveIsReproducible(t *testing.T) {
	for _, signed := range []bool{false, true} {
		in := testInput()
		if signed {
			in.SignKey = testKey()
		}
		a := writeBundle(t, in)
		// A second Input built afresh: equal values, not the same pointers.
		in2 := testInput()
		in2.SignKey = in.SignKey
		if b := writeBundle(t, in2); !bytes.Equal(a, b) {
			t.Errorf("signed=%v: two runs gave different bytes", signed)
		}
		// The statement's own times are UTC, whatever zone the snapshots were read in.
		in3 := testInput()
		in3.TenantStart = in3.TenantStart.In(time.FixedZone("UTC+5", 5*3600))
		if st := memberData(t, writeBundle(t, in3), FileStatement); !bytes.Contains(st, []byte(`"tenant_start":"2026-11-29T10:20:00Z"`)) {
			t.Errorf("signed=%v: statement times not in UTC:\n%s", signed, st)
		}
	}
}

func TestArchiveHeaders(t *testing.T) {
	b := writeBundle(t, testInput())
	if b[3] != 0 || !bytes.Equal(b[4:8], []byte{0, 0, 0, 0}) {
		t.Errorf("gzip header carries a name or time: % x", b[:10])
	}
	mtime := t0.Add(2*time.Hour + 90*time.Millisecond).Truncate(time.Second)
	for _, m := range readMembers(t, b) {
		h := m.hdr
		wantMode := int64(0o644)
		if strings.HasSuffix(h.Name, "/") {
			wantMode = 0o755
		}
		if h.Mode != wantMode || h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" || !h.ModTime.Equal(mtime) {
			t.Errorf("%s: mode %o uid %d gid %d uname %q gname %q mtime %v", h.Name, h.Mode, h.Uid, h.Gid, h.Uname, h.Gname, h.ModTime)
		}
	}
}

func TestWriteRefusesBadInput(t *testing.T) {
	in := testInput()
	in.Result = nil
	if _, err := Write(&bytes.Buffer{}, in); err == nil {
		t.Error("Write without a result succeeded")
	}
	in = testInput()
	in.Result.MapsDiffs["../../etc/passwd"] = "x"
	if _, err := Write(&bytes.Buffer{}, in); err == nil || !strings.Contains(err.Error(), "PID@START") {
		t.Errorf("Write with a path as a process key: %v", err)
	}
}

// extract writes the regular files of a bundle under dir, as tar would.
func extract(t *testing.T, b []byte, dir string) {
	t.Helper()
	for _, m := range readMembers(t, b) {
		p := filepath.Join(dir, filepath.FromSlash(m.hdr.Name))
		if strings.HasSuffix(m.hdr.Name, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(p, m.data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSha256sumChecksExtractedBundle(t *testing.T) {
	if _, err := exec.LookPath("sha256sum"); err != nil {
		t.Skip("sha256sum (coreutils) is not installed")
	}
	dir := t.TempDir()
	in := testInput()
	extract(t, writeBundle(t, in), dir)
	bag := filepath.Join(dir, DefaultName(in.After.ID))
	for _, manifest := range []string{FileManifest, FileTagManifest} {
		cmd := exec.Command("sha256sum", "--strict", "-c", manifest)
		cmd.Dir = bag
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("sha256sum -c %s: %v\n%s", manifest, err, out)
		}
		if !strings.Contains(string(out), "data/raw/666@990000/cmdline: OK") && !strings.Contains(string(out), "statement.intoto.json: OK") {
			t.Errorf("sha256sum -c %s did not check everything:\n%s", manifest, out)
		}
	}
	// And it fails on an altered file.
	if err := os.WriteFile(filepath.Join(bag, "data", "report.md"), []byte("edited"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sha256sum", "-c", FileManifest)
	cmd.Dir = bag
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "data/report.md: FAILED") {
		t.Errorf("sha256sum -c passed an edited report.md: %v\n%s", err, out)
	}
}

package capture

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpusnap/gpusnap/capture/procfs"
	"github.com/gpusnap/gpusnap/internal/livetest"
	"github.com/gpusnap/gpusnap/snapshot"
)

// testMemory is the memory of a record at path for this host, as a capture
// of it would make it, and the warnings it gives.
func testMemory(t *testing.T, path string) (*refusalMemory, *[]string) {
	t.Helper()
	var h snapshot.Host
	r := procfs.NewReader(nil, false, false)
	rootfd, err := unix.Open("/proc", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(rootfd)
	if errs := readHost(r, rootfd, "/proc", &h); len(errs) > 0 {
		t.Fatalf("host facts: %q", errs)
	}
	var warned []string
	m := newRefusalMemory(Options{RefusalRecord: path, Warn: func(s string) { warned = append(warned, s) }}, &h)
	if !m.keyed() {
		t.Fatal(m.keyErr)
	}
	return m, &warned
}

// A refusal remembered is recalled, for this boot, kernel, build and
// credentials only: a record of another boot or kernel is stale and asks
// for BPF to be tried again, without a word.
func TestRefusalRecalledForThisBootOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpusnap.db.bpf-refusal")
	m, warned := testMemory(t, path)
	var scan snapshot.Scan
	if rec := m.recall(&scan); rec != nil {
		t.Fatalf("no record yet, recalled %+v", rec)
	}
	if err := m.remember(context.Background(), "load tasks iterator: refused"); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("record: %v %v, want mode 0600", fi, err)
	}
	rec := m.recall(&scan)
	if rec == nil || rec.Reason != "load tasks iterator: refused" || !strings.Contains(m.note(rec), path) {
		t.Fatalf("recalled %+v, want the reason remembered", rec)
	}
	for name, change := range map[string]func(*refusalMemory){
		"another boot":                func(m *refusalMemory) { m.key.BootID = "00000000-0000-0000-0000-000000000000" },
		"another kernel":              func(m *refusalMemory) { m.key.KernelRelease += "+1" },
		"another build":               func(m *refusalMemory) { m.key.Programs = "0000000000000000" },
		"other credentials":           func(m *refusalMemory) { m.key.Credentials = "Uid 65534 65534 65534 65534" },
		"a key not read (no boot id)": func(m *refusalMemory) { m.key, m.keyErr = nil, os.ErrNotExist },
	} {
		other, _ := testMemory(t, path)
		change(other)
		if rec := other.recall(&scan); rec != nil {
			t.Errorf("%s: recalled %+v, want BPF tried again", name, rec)
		}
	}
	if len(*warned) > 0 || len(scan.Errors) > 0 {
		t.Errorf("a stale record is no trouble: warned %q, errors %q", *warned, scan.Errors)
	}
	m.forget()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("after BPF loaded, the record is still there: %v", err)
	}
	// A capture before the store made its directory writes nothing, and says nothing.
	missing, _ := testMemory(t, filepath.Join(t.TempDir(), "no-such-dir", "gpusnap.db.bpf-refusal"))
	if err := missing.remember(context.Background(), "refused"); err != nil {
		t.Errorf("remember with the store's directory not made yet: %v", err)
	}
}

// A record that the caller cannot have written itself, or that is not a
// record, is ignored, never obeyed, with one line on Warn and in the scan's
// errors: a FIFO does not block, a sparse giant is not read.
func TestRefusalRecordUntrusted(t *testing.T) {
	livetest.Require(t) // chown to another user needs root
	dir := t.TempDir()
	path := filepath.Join(dir, "gpusnap.db.bpf-refusal")
	m, _ := testMemory(t, path)
	good := func(t *testing.T) {
		t.Helper()
		os.Remove(path)
		if err := m.remember(context.Background(), "refused"); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name, want string
		plant      func(t *testing.T)
	}{
		{"another user's", "owned by uid 65534", func(t *testing.T) { good(t); must(t, os.Chown(path, 65534, 65534)) }},
		{"writable by others", "writable by its group or others", func(t *testing.T) { good(t); must(t, os.Chmod(path, 0o666)) }},
		{"another user's link to a good record", "symlink owned by uid 65534", func(t *testing.T) {
			good(t)
			must(t, os.Rename(path, path+".real"))
			must(t, os.Symlink(path+".real", path))
			must(t, os.Lchown(path, 65534, 65534))
		}},
		{"a FIFO", "not a regular file", func(t *testing.T) { os.Remove(path); must(t, syscall.Mkfifo(path, 0o600)) }},
		{"a sparse giant", "more than a record's", func(t *testing.T) { good(t); must(t, os.Truncate(path, 1<<40)) }},
		{"not JSON", "not a refusal record", func(t *testing.T) { os.Remove(path); must(t, os.WriteFile(path, []byte("refused\n"), 0o600)) }},
		{"a field of its own", "not a refusal record", func(t *testing.T) {
			good(t)
			data, err := os.ReadFile(path)
			must(t, err)
			must(t, os.WriteFile(path, []byte(strings.Replace(string(data), "{", `{"skip":true,`, 1)), 0o600))
		}},
		{"no reason", "fields missing", func(t *testing.T) {
			good(t)
			data, err := os.ReadFile(path)
			must(t, err)
			must(t, os.WriteFile(path, []byte(strings.Replace(string(data), `"reason":"refused"`, `"reason":""`, 1)), 0o600))
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.plant(t)
			other, warned := testMemory(t, path)
			var scan snapshot.Scan
			if rec := other.recall(&scan); rec != nil {
				t.Fatalf("recalled %+v, want it ignored", rec)
			}
			if len(*warned) != 1 || !strings.Contains((*warned)[0], c.want) || !strings.Contains((*warned)[0], "ignored") ||
				len(scan.Errors) != 1 || scan.Errors[0] != (*warned)[0] {
				t.Errorf("warned %q, errors %q: want one line saying %q", *warned, scan.Errors, c.want)
			}
			os.Remove(path)
			os.Remove(path + ".real")
		})
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpusnap/gpusnap/internal/testenv"
	"github.com/gpusnap/gpusnap/store"
)

// gpusnapProc runs gpusnap as a real separate process: the test binary,
// which TestMain turns into gpusnap (a second read-write bbolt open blocks
// even inside one process, so the fault tests need processes of their own).
func gpusnapProc(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	// A -race binary sleeps a second at exit unless told not to.
	cmd.Env = append(os.Environ(), gpusnapProcessEnv+"=1", "GORACE=atexit_sleep_ms=0 "+os.Getenv("GORACE"))
	return cmd
}

func TestStoreCheck(t *testing.T) {
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	g := storeArgs(t, db)
	if code, _, errs := gpusnap(t, append([]string{"store", "check"}, g...)...); code != 2 || !strings.Contains(errs, "no store at") {
		t.Errorf("check of a missing store: %d %s", code, errs)
	}
	for range 3 {
		if code, _, errs := gpusnap(t, append([]string{"snapshot"}, g...)...); code != 0 {
			t.Fatal(errs)
		}
	}
	code, out, errs := gpusnap(t, append([]string{"store", "check"}, g...)...)
	if code != 0 || !strings.Contains(out, "is sound: 3 snapshots") {
		t.Errorf("check of a sound store: %d %q %s", code, out, errs)
	}
	code, out, _ = gpusnap(t, append([]string{"store", "check", "--json"}, g...)...)
	if code != 0 || !strings.Contains(out, `"ok": true`) || !strings.Contains(out, `"problems": []`) {
		t.Errorf("check --json: %d %s", code, out)
	}
}

// TestDamagedStoreIsReportedAndLeftAlone damages a sound store in the ways a
// disk or a careless copy does; every command that reads it exits 2 with one
// line naming the damage, no panic, and the file keeps its bytes.
func TestDamagedStoreIsReportedAndLeftAlone(t *testing.T) {
	dir := t.TempDir()
	sound := filepath.Join(dir, "sound.db")
	g := storeArgs(t, sound)
	var ids []string
	for range 12 {
		code, out, errs := gpusnap(t, append([]string{"baseline", "--tenant", "job-1"}, g...)...)
		if code != 0 {
			t.Fatal(errs)
		}
		ids = append(ids, lastLine(out))
	}
	good, err := os.ReadFile(sound)
	if err != nil {
		t.Fatal(err)
	}
	const page = 4096
	for name, damage := range map[string]func([]byte) []byte{
		"garbage": func(b []byte) []byte { return bytes.Repeat([]byte("not a database "), len(b)/15) },
		"truncated": func(b []byte) []byte {
			// Half of the pages in use (each meta page's high-water mark): bbolt
			// grows a file ahead of need, so half the file can hold them all.
			hw := max(binary.LittleEndian.Uint64(b[56:]), binary.LittleEndian.Uint64(b[page+56:]))
			return b[:hw*page/2]
		},
		"zeroed-pages": func(b []byte) []byte {
			clear(b[2*page:])
			return b
		},
		"corrupt-freelist": func(b []byte) []byte {
			for m := range 2 { // both meta pages name a freelist page; fill them with wild page ids
				fl := int(binary.LittleEndian.Uint64(b[m*page+48:]))
				for i := fl*page + 16; i < (fl+1)*page; i += 8 {
					binary.LittleEndian.PutUint64(b[i:], 1<<40)
				}
			}
			return b
		},
	} {
		t.Run(name, func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "gpusnap.db")
			bad := damage(bytes.Clone(good))
			if err := os.WriteFile(db, bad, 0o600); err != nil {
				t.Fatal(err)
			}
			for _, cmd := range [][]string{{"store", "check"}, {"list"}, {"show", ids[3]}, {"snapshot"}, {"rm", ids[0]}, {"prune", "--keep-last", "1"}} {
				// Separate processes: an in-process panic could hide behind a recover in the test.
				var stdout, stderr bytes.Buffer
				args := append(append([]string{cmd[0]}, storeArgs(t, db)...), cmd[1:]...)
				if cmd[0] == "store" {
					args = append([]string{"store", "check"}, storeArgs(t, db)...)
				}
				c := gpusnapProc(args...)
				c.Stdout, c.Stderr = &stdout, &stderr
				err := c.Run()
				var exit *exec.ExitError
				if !errors.As(err, &exit) || exit.ExitCode() != 2 {
					t.Errorf("%v: %v, want exit 2\n%s", cmd, err, stderr.String())
				}
				last := lastLine(stderr.String())
				if !strings.HasPrefix(last, "gpusnap: store "+db+" is damaged: ") {
					t.Errorf("%v: last line %q", cmd, last)
				}
				if strings.Contains(stderr.String(), "goroutine") || strings.Contains(stderr.String(), "panic") {
					t.Errorf("%v printed a stack trace:\n%s", cmd, stderr.String())
				}
			}
			after, err := os.ReadFile(db)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(after, bad) {
				t.Error("the damaged file was changed")
			}
		})
	}
}

func TestSecondWriterWaitsThenGivesUp(t *testing.T) {
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	g := storeArgs(t, db)
	if code, _, errs := gpusnap(t, append([]string{"snapshot"}, g...)...); code != 0 {
		t.Fatal(errs)
	}
	held, err := store.Open(db, store.Options{LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	c := gpusnapProc(append([]string{"snapshot", "--lock-timeout", "700ms"}, g...)...)
	c.Stderr = &stderr
	start := time.Now()
	err = c.Run()
	waited := time.Since(start)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(stderr.String(), "is locked by another gpusnap") {
		t.Errorf("second writer: %v %s", err, stderr.String())
	}
	if waited < 600*time.Millisecond {
		t.Errorf("second writer gave up after %s, before --lock-timeout 700ms", waited)
	}
	if strings.Count(strings.TrimSpace(stderr.String()), "\n") != 0 {
		t.Errorf("more than one line: %q", stderr.String())
	}
	_ = held.Close()

	// Readers share the file with each other.
	r, err := store.Open(db, store.Options{ReadOnly: true, LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c = gpusnapProc(append([]string{"list", "--lock-timeout", "500ms"}, g...)...)
	if out, err := c.CombinedOutput(); err != nil {
		t.Errorf("a reader blocked another: %v %s", err, out)
	}
}

// TestConcurrentWritersLoseNothing runs writers at once as separate
// processes: they queue on the lock, and every one's snapshot is stored.
func TestConcurrentWritersLoseNothing(t *testing.T) {
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	g := storeArgs(t, db)
	const writers = 8
	ids := make([]string, writers)
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			out, err := gpusnapProc(append([]string{"baseline", "--tenant", "job-1", "--lock-timeout", "60s"}, g...)...).Output()
			if err != nil {
				t.Errorf("writer %d: %v", i, err)
				return
			}
			ids[i] = lastLine(string(out))
		})
	}
	wg.Wait()
	st, err := store.Open(db, store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	metas, err := st.List(store.Filter{})
	if err != nil || len(metas) != writers {
		t.Fatalf("%d snapshots stored of %d (%v)", len(metas), writers, err)
	}
	for _, id := range ids {
		if _, err := st.Get(id); err != nil {
			t.Error(err)
		}
	}
}

// TestKill9DuringWritesLosesNoReportedSnapshot kills gpusnap at random moments
// of 200 snapshot writes: whatever a kill interrupts, the file opens, passes
// the consistency check, and holds every snapshot whose command printed its
// id. A killed process leaves its writes in the page cache, so this shows
// that a commit cut short at any point is never half visible; it cannot show
// what bbolt's syncs are for (a power cut, where unsynced pages are lost).
func TestKill9DuringWritesLosesNoReportedSnapshot(t *testing.T) {
	testenv.NotShort(t, "200 processes")
	db := filepath.Join(t.TempDir(), "gpusnap.db")
	g := storeArgs(t, db)
	args := append([]string{"snapshot", "--lock-timeout", "30s"}, g...)
	// How long a run takes here: kills land in [0, 2x) of the median of 5,
	// so about half the runs are cut short, at every stage of their write.
	var runs []time.Duration
	for range 5 {
		start := time.Now()
		if out, err := gpusnapProc(args...).CombinedOutput(); err != nil {
			t.Fatalf("%v %s", err, out)
		}
		runs = append(runs, time.Since(start))
	}
	slices.Sort(runs)
	typical := runs[2]
	var reported []string
	killed := 0
	for range 200 {
		var stdout bytes.Buffer
		c := gpusnapProc(args...)
		c.Stdout = &stdout
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		timer := time.AfterFunc(time.Duration(rand.Int64N(2*int64(typical))), func() {
			_ = c.Process.Signal(syscall.SIGKILL)
		})
		err := c.Wait()
		timer.Stop()
		if err == nil {
			reported = append(reported, lastLine(stdout.String()))
			continue
		}
		if st, ok := c.ProcessState.Sys().(syscall.WaitStatus); !ok || st.Signal() != syscall.SIGKILL {
			t.Fatalf("a run failed without being killed: %v", err)
		}
		killed++
	}
	t.Logf("%d runs killed, %d reported success (a run takes %s)", killed, len(reported), typical)
	if killed < 10 || len(reported) < 10 {
		t.Fatalf("kills did not spread over the runs: %d killed, %d succeeded", killed, len(reported))
	}
	st, err := store.Open(db, store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r, err := st.Check()
	if err != nil || len(r.Problems) > 0 {
		t.Fatalf("after kills: %v %v", err, r.Problems)
	}
	for _, id := range reported {
		if _, err := st.Get(id); err != nil {
			t.Errorf("reported snapshot lost: %v", err)
		}
	}
}

func TestRootRefusesUnsafeStorePath(t *testing.T) {
	testenv.Root(t, "the store path checks apply to root only")
	dir := filepath.Join(t.TempDir(), "shared")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "gpusnap.db")
	code, _, errs := gpusnap(t, append([]string{"snapshot"}, storeArgs(t, db)...)...)
	if code != 2 || !strings.Contains(errs, "refusing store "+db) || !strings.Contains(errs, "writable by its group or others") {
		t.Errorf("world-writable directory: %d %s", code, errs)
	}
	if _, err := os.Stat(db); err == nil {
		t.Error("the store was created anyway")
	}
}

// TestStoreThatIsADirectory: --db naming a directory is said to be one, not
// a damaged store, and it is left as it was.
func TestStoreThatIsADirectory(t *testing.T) {
	dir := t.TempDir()
	for _, cmd := range [][]string{{"list"}, {"snapshot"}, {"store", "check"}} {
		args := append(cmd, storeArgs(t, dir)...)
		code, out, errs := gpusnap(t, args...)
		oneLine(t, args, code, out, errs, "store "+dir+" is a directory, not a store file")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("the directory was written to: %v", entries)
	}
}

// gpusnapWithin runs gpusnap as a process of its own, killed after a
// minute (a wait on a FUSE server is killable), and returns its stdout.
func gpusnapWithin(t *testing.T, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := gpusnapProc(args...)
	run := exec.CommandContext(ctx, cmd.Path, cmd.Args[1:]...)
	run.Env = cmd.Env
	var stdout, stderr bytes.Buffer
	run.Stdout, run.Stderr = &stdout, &stderr
	err := run.Run()
	if ctx.Err() != nil {
		t.Fatalf("gpusnap %s did not finish in a minute (waiting on the FUSE server?): %s", strings.Join(args, " "), stderr.String())
	}
	if code := run.ProcessState.ExitCode(); code != 0 && code != exitFindings {
		t.Fatalf("gpusnap %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes()
}

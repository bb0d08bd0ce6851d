package livetest

import (
	_ "embed"
	"errors"
	"os/exec"
	"syscall"
	"testing"
)

// blindSource is the C helper of device users the syscall tracepoints alone
// miss, by opens through io_uring and by 32-bit calls.
//
//go:embed helper/blind.c
var blindSource []byte

// IOUringOpen opens path read-write twice through io_uring's
// IORING_OP_OPENAT (once inline, once in an io-wq worker) in a process of its
// own, and returns that process's PID once it has exited.
func IOUringOpen(t testing.TB, path string) int {
	t.Helper()
	return runBlind(t, buildC(t, "blind", blindSource), "uring", path)
}

// IA32OpenMap opens path read-write and maps it shared in a 32-bit process
// (gcc -m32 -static, with openat and mmap2 by their ia32 numbers), and
// returns its PID once it has exited. It skips where the kernel runs no
// 32-bit programs.
func IA32OpenMap(t testing.TB, path string) int {
	t.Helper()
	return runBlind(t, buildC(t, "blind32", blindSource, "-m32", "-static"), "plain", path)
}

func runBlind(t testing.TB, bin, mode, path string) int {
	t.Helper()
	out, err := exec.Command(bin, mode, path).Output()
	if errors.Is(err, syscall.ENOEXEC) {
		t.Skipf("livetest: this kernel runs no 32-bit programs (no IA32 emulation): %v", err)
	}
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("livetest: %s %s: %v: %s", bin, mode, err, ee.Stderr)
		}
		t.Fatalf("livetest: %s %s: %v", bin, mode, err)
	}
	pids := parseLines(t, string(out))
	if len(pids) != 1 {
		t.Fatalf("livetest: %s printed %q", bin, out)
	}
	return pids[0]
}

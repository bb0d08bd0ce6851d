// Command kernelmatrix is both halves of scripts/kernel-matrix.sh. As a QEMU
// guest's PID 1 it mounts what the tests need, loads the guest's modules,
// runs its test binary and powers off. On the host, `kernelmatrix table LOG...` prints the Markdown table of
// what each guest's kernel loaded, exiting 1 where a guest's tests failed,
// skipped or did not finish.
package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

func main() {
	if os.Getpid() == 1 {
		guest()
		return
	}
	if len(os.Args) < 3 || os.Args[1] != "table" {
		fmt.Fprintln(os.Stderr, "usage: kernelmatrix table LOG...")
		os.Exit(2)
	}
	ok, err := printTable(os.Stdout, os.Args[2:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "kernelmatrix:", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

// guest runs the tests as the guest's init and powers the guest off. The
// console (the serial port) carries their output, framed by marker lines.
func guest() {
	for _, m := range []struct{ src, dir, fs string }{
		{"proc", "/proc", "proc"}, {"sysfs", "/sys", "sysfs"}, {"devtmpfs", "/dev", "devtmpfs"},
		{"tmpfs", "/tmp", "tmpfs"}, {"bpf", "/sys/fs/bpf", "bpf"}, {"tracefs", "/sys/kernel/tracing", "tracefs"},
	} {
		_ = os.MkdirAll(m.dir, 0o755)
		if err := unix.Mount(m.src, m.dir, m.fs, 0, ""); err != nil {
			fmt.Printf("%s mount %s: %v\n", marker, m.dir, err)
		}
	}
	var u unix.Utsname
	_ = unix.Uname(&u)
	fmt.Printf("%s kernel %s\n", marker, unix.ByteSliceToString(u.Release[:]))
	loadModules()
	args := []string{"-test.v", "-test.count=1", "-test.timeout=20m"}
	// gpusnap.run=REGEXP on the kernel command line runs only those tests,
	// gpusnap.skip=REGEXP all but those, of gpusnap.test=BINARY (/bpf.test).
	test := "/bpf.test"
	if cmdline, err := os.ReadFile("/proc/cmdline"); err == nil {
		for _, f := range strings.Fields(string(cmdline)) {
			if re, ok := strings.CutPrefix(f, "gpusnap.run="); ok {
				args = append(args, "-test.run="+re)
			}
			if re, ok := strings.CutPrefix(f, "gpusnap.skip="); ok {
				args = append(args, "-test.skip="+re)
			}
			if bin, ok := strings.CutPrefix(f, "gpusnap.test="); ok {
				test = bin
			}
		}
	}
	cmd := exec.Command(test, args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stdout
	cmd.Env = []string{"PATH=/", "TMPDIR=/tmp", "HOME=/tmp", "GPUSNAP_KERNEL_MATRIX=1", "GPUSNAP_DEVICE_USER_BIN=/burst",
		"GPUSNAP_DRMUSER_BIN=/drmuser"}
	rc := 0
	if err := cmd.Run(); err != nil {
		rc = 1
		fmt.Printf("%s %s: %v\n", marker, test, err)
	}
	fmt.Printf("%s exit %d\n", marker, rc)
	_ = os.Stdout.Sync()
	unix.Sync()
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
}

// loadModules loads the kernel modules /modules/order names, in its order
// (dependencies first), from /modules: the DRM guest's vgem and what it
// needs. They are xz files as Debian ships them, which the kernel unpacks.
func loadModules() {
	order, err := os.ReadFile("/modules/order")
	if err != nil {
		return // a guest without modules
	}
	for _, name := range strings.Fields(string(order)) {
		f, err := os.Open("/modules/" + name)
		if err == nil {
			err = unix.FinitModule(int(f.Fd()), "", unix.MODULE_INIT_COMPRESSED_FILE)
			f.Close()
		}
		if err != nil {
			fmt.Printf("%s module %s: %v\n", marker, name, err)
		}
	}
}

// marker starts the lines the guest's init writes itself.
const marker = "gpusnap-matrix:"

// printTable writes the table of logs to w, one row a kernel (the logs of
// one kernel's guests merged). ok is false where a guest's tests did not
// all pass.
func printTable(w io.Writer, logs []string) (ok bool, err error) {
	ok = true
	fmt.Fprintln(w, "| kernel | capture iterators | lsm | fentry | kprobe | tracepoint | drm | tests |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	var kernels []*result
	for _, name := range logs {
		data, err := os.ReadFile(name)
		if err != nil {
			return false, err
		}
		r := parseLog(string(data))
		if !r.passed() {
			ok = false
		}
		i := slices.IndexFunc(kernels, func(k *result) bool { return k.kernel == r.kernel })
		if i < 0 {
			kernels = append(kernels, &r)
			continue
		}
		kernels[i].merge(r)
	}
	for _, r := range kernels {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", r.kernel, cell(r.iterators), cell(r.hook("lsm")),
			cell(r.hook("fentry")), cell(r.hook("kprobe")), cell(r.hook("tracepoint")), cell(r.drm), r.verdict())
	}
	return ok, nil
}

func cell(s string) string {
	if s == "" {
		return "not run"
	}
	return strings.ReplaceAll(s, "|", `\|`)
}

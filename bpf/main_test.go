package bpf

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// deviceUserEnv makes the test binary a short-lived device user
// (TestEachHookShortUsers): it opens the node the variable names read-write,
// maps a page of it shared and exits.
const deviceUserEnv = "GPUSNAP_BPF_DEVICE_USER"

func TestMain(m *testing.M) {
	if node := os.Getenv(deviceUserEnv); node != "" {
		os.Exit(useDevice(node))
	}
	if os.Getenv(openWalkEnv) != "" {
		os.Exit(openWalkVerdict())
	}
	os.Exit(m.Run())
}

func useDevice(node string) int {
	fd, err := unix.Open(node, unix.O_RDWR, 0)
	if err != nil {
		return 3
	}
	if _, err := unix.Mmap(fd, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		return 4
	}
	return 0
}

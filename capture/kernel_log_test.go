package capture

import (
	"context"
	"os"
	"strings"
	"testing"
)

// Every snapshot says where the kernel log stood, or why it does not: a
// fixture proc root is another machine, whose kernel log is not this host's
// /dev/kmsg; --kmsg FILE names one.
func TestCaptureKernelLogPosition(t *testing.T) {
	s, err := Capture(context.Background(), Options{ProcRoot: fixtureRoot})
	must(t, err)
	if kl := s.KernelLog; kl == nil || !strings.Contains(kl.Unavailable, "not this host's procfs") {
		t.Errorf("fixture root, no --kmsg: %+v", kl)
	}

	s, err = Capture(context.Background(), Options{ProcRoot: fixtureRoot, KernelLog: "../kmsg/testdata/window.kmsg"})
	must(t, err)
	if kl := s.KernelLog; kl == nil || kl.Unavailable != "" || kl.First != 1000 || kl.Next != 1022 || kl.BootID != s.Host.BootID || kl.Source != "../kmsg/testdata/window.kmsg" {
		t.Errorf("--kmsg file: %+v", kl)
	}

	s, err = Capture(context.Background(), Options{})
	must(t, err)
	kl := s.KernelLog
	switch {
	case kl == nil:
		t.Fatal("live capture recorded no kernel-log position")
	case os.Geteuid() != 0:
		if !strings.Contains(kl.Unavailable, "CAP_SYSLOG") && kl.Unavailable != "" {
			t.Errorf("not root: %+v", kl)
		}
	case kl.Unavailable != "" || kl.Source != "/dev/kmsg" || kl.Next == 0 || kl.BootID != s.Host.BootID:
		t.Errorf("live /dev/kmsg as root: %+v", kl)
	}
}

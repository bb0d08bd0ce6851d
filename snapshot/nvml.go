package snapshot

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// NVMLOptions choose where NVML's view comes from.
type NVMLOptions struct {
	Disabled    bool   // --no-nvml
	FixturePath string // --nvml-fixture: replay a JSON fixture instead of libnvidia-ml
	Require     bool   // --require-nvml: an unreadable NVML is an error, not a note
	// Lib, when set, is read in place of libnvidia-ml: tests pass go-nvml's mocks.
	Lib nvml.Interface
	// Timeout bounds the read of the library (--nvml-timeout); 0 waits as
	// long as it takes. A hung driver's call cannot be interrupted: it is
	// abandoned, and the view says "timed out".
	Timeout time.Duration
}

// Sources of an NVML view.
const (
	NVMLSourceLibrary  = "library"
	NVMLSourceDisabled = "disabled"
	nvmlSourceFixture  = "fixture:" // followed by the fixture's path
)

// ReadNVML reads NVML's view as opts say. Without libnvidia-ml (or a driver,
// or permission) the view says why in Unavailable and the error is nil,
// unless opts.Require. A fixture that cannot be read or parsed is an error.
func ReadNVML(opts NVMLOptions) (NVML, error) {
	if opts.Disabled {
		return NVML{Source: NVMLSourceDisabled, Unavailable: "disabled by --no-nvml"}, nil
	}
	var n NVML
	if opts.FixturePath != "" {
		lib, err := loadNVMLFixture(opts.FixturePath)
		if err != nil {
			return NVML{}, err
		}
		n = readNVML(lib)
		n.Source = nvmlSourceFixture + opts.FixturePath
	} else {
		lib := opts.Lib
		if lib == nil {
			lib = nvml.New()
		}
		n = readNVMLWithin(opts.Timeout, lib)
		n.Source = NVMLSourceLibrary
	}
	if opts.Require && n.Unavailable != "" {
		return n, fmt.Errorf("NVML cannot be read: %s (--require-nvml)", n.Unavailable)
	}
	return n, nil
}

// nvmlBusy is full while a read of the library runs. A read that timed out
// is abandoned, not ended (its cgo call into a hung driver cannot be
// interrupted): until it returns, a later read in this process (watch reads
// again and again) does not start another and pile up blocked threads.
var nvmlBusy = make(chan struct{}, 1)

// readNVMLWithin is readNVML that gives up after timeout (0: never).
func readNVMLWithin(timeout time.Duration, lib nvml.Interface) NVML {
	if timeout <= 0 {
		return readNVML(lib)
	}
	select {
	case nvmlBusy <- struct{}{}:
	default:
		return NVML{Unavailable: "timed out: an earlier call into libnvidia-ml has not returned"}
	}
	done := make(chan NVML, 1)
	go func() {
		defer func() { <-nvmlBusy }()
		done <- readNVML(lib)
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case n := <-done:
		return n
	case <-t.C:
		return NVML{Unavailable: fmt.Sprintf("timed out after %s: libnvidia-ml did not answer (see --nvml-timeout)", timeout)}
	}
}

// NVIDIADriverSign names what shows that the NVIDIA driver is loaded on the
// host whose /proc is procRoot: <procRoot>/driver/nvidia, or, on the live
// /proc, a /dev/nvidia* node; "" when neither does. A capture without NVML
// there has no GPU memory to compare, and the operator should hear it then.
func NVIDIADriverSign(procRoot string) string {
	if fi, err := os.Stat(filepath.Join(procRoot, "driver", "nvidia")); err == nil && fi.IsDir() {
		return filepath.Join(procRoot, "driver", "nvidia")
	}
	if isProcfs(procRoot) {
		if nodes, _ := filepath.Glob("/dev/nvidia*"); len(nodes) > 0 {
			return nodes[0]
		}
	}
	return ""
}

// Package nvmlread reads NVML's view of the GPUs into snapshot.NVML, from
// libnvidia-ml (cgo, go-nvml), go-nvml's mocks or an NVML fixture, and
// writes fixtures back. The capture takes it as a capture.NVMLReader, so the
// packages that need only the snapshot types link no cgo.
package nvmlread

import (
	"fmt"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpusnap/gpusnap/snapshot"
)

// Options choose where NVML's view comes from. They are the
// capture.NVMLReader that cmd hands the capture.
type Options struct {
	Disabled    bool   // --no-nvml
	FixturePath string // --nvml-fixture replays a JSON fixture instead of libnvidia-ml
	Require     bool   // --require-nvml makes an unreadable NVML an error, not a note
	// Lib, when set, is read in place of libnvidia-ml. Tests pass go-nvml's mocks.
	Lib nvml.Interface
	// Timeout bounds the read of the library (--nvml-timeout), and 0 waits
	// as long as it takes. A hung driver's call cannot be interrupted, so it
	// is abandoned and the view says "timed out".
	Timeout time.Duration

	// sampling is set by a Sampler, whose read also takes the GPUs' own
	// utilization and every per-process sample since the last read.
	sampling *sampling
}

// ReadNVML reads NVML's view as opts say. Without libnvidia-ml (or a driver,
// or permission) the view says why in Unavailable and the error is nil,
// unless opts.Require. A fixture that cannot be read or parsed is an error.
func (opts Options) ReadNVML() (snapshot.NVML, error) {
	if opts.Disabled {
		return snapshot.NVML{Source: snapshot.NVMLSourceDisabled, Unavailable: "disabled by --no-nvml"}, nil
	}
	var n snapshot.NVML
	if opts.FixturePath != "" {
		lib, err := loadNVMLFixture(opts.FixturePath)
		if err != nil {
			return snapshot.NVML{}, err
		}
		if opts.sampling != nil {
			lib.replayAt(time.Now(), opts.sampling.start)
		}
		n = readNVML(lib, opts.sampling)
		n.Source = snapshot.NVMLSourceFixture + opts.FixturePath
	} else {
		lib := opts.Lib
		if lib == nil {
			lib = nvml.New()
		}
		n = readNVMLWithin(opts.Timeout, lib, opts.sampling)
		n.Source = snapshot.NVMLSourceLibrary
	}
	if opts.Require && n.Unavailable != "" {
		return n, fmt.Errorf("NVML cannot be read: %s (--require-nvml)", n.Unavailable)
	}
	return n, nil
}

// nvmlBusy is full while a read of the library runs. A read that timed out
// is abandoned, not ended, because its cgo call into a hung driver cannot be
// interrupted. Until it returns, a later read in this process (watch reads
// again and again) does not start another and pile up blocked threads.
var nvmlBusy = make(chan struct{}, 1)

// readNVMLWithin is readNVML that gives up after timeout, or never when it
// is 0.
func readNVMLWithin(timeout time.Duration, lib nvml.Interface, sm *sampling) snapshot.NVML {
	if timeout <= 0 {
		return readNVML(lib, sm)
	}
	select {
	case nvmlBusy <- struct{}{}:
	default:
		return snapshot.NVML{Unavailable: "timed out: an earlier call into libnvidia-ml has not returned"}
	}
	done := make(chan snapshot.NVML, 1)
	go func() {
		defer func() { <-nvmlBusy }()
		done <- readNVML(lib, sm)
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case n := <-done:
		return n
	case <-t.C:
		return snapshot.NVML{Unavailable: fmt.Sprintf("timed out after %s: libnvidia-ml did not answer (see --nvml-timeout)", timeout)}
	}
}

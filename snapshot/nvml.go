package snapshot

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// NVMLOptions choose where NVML's view comes from.
type NVMLOptions struct {
	Disabled    bool   // --no-nvml
	FixturePath string // --nvml-fixture: replay a JSON fixture instead of libnvidia-ml
	Require     bool   // --require-nvml: an unreadable NVML is an error, not a note
	// Lib, when set, is read in place of libnvidia-ml: tests pass go-nvml's mocks.
	Lib nvml.Interface
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
		n = readNVML(lib)
		n.Source = NVMLSourceLibrary
	}
	if opts.Require && n.Unavailable != "" {
		return n, fmt.Errorf("NVML cannot be read: %s (--require-nvml)", n.Unavailable)
	}
	return n, nil
}

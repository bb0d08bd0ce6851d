package snapshot

// NVMLOptions choose where NVML's view comes from.
type NVMLOptions struct {
	Disabled    bool   // --no-nvml
	FixturePath string // --nvml-fixture: replay a JSON fixture instead of libnvidia-ml
	Require     bool   // --require-nvml: an unreadable NVML is an error, not a note
}

// ReadNVML reads NVML's view as opts say.
// TODO(NVML issue): the library, fixtures and mocks.
func ReadNVML(opts NVMLOptions) (NVML, error) {
	return NVML{Source: "disabled", Unavailable: "not implemented"}, nil
}

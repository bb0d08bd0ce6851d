package snapshot

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// WriteNVMLFixture writes n in the NVML fixture format, so a state read on a
// host with GPUs replays on one without: reading the fixture back gives n
// again (Source aside). Values NVML failed to give become the fixture's
// errors; values it marked not available are left out, as NVML reports them.
func WriteNVMLFixture(w io.Writer, n NVML) error {
	if n.Unavailable != "" {
		return fmt.Errorf("NVML was not read (%s): no state to export", n.Unavailable)
	}
	f := nvmlFixture{
		DriverVersion:     n.DriverVersion,
		NVMLVersion:       n.NVMLVersion,
		CUDADriverVersion: n.CUDADriverVersion,
		Devices:           n.Devices,
	}
	if f.Devices == nil {
		f.Devices = []GPU{}
	}
	for path, reason := range n.Missing {
		if name, ok := nvmlCodeByReason(reason); ok && errorPathRE.MatchString(path) {
			if f.Errors == nil {
				f.Errors = map[string]string{}
			}
			f.Errors[path] = name
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(f)
}

// ExportNVMLFixture writes n as a fixture to a new file at path, mode 0600.
// It never replaces an existing file nor follows a symlink planted at path.
func ExportNVMLFixture(path string, n NVML) (err error) {
	file, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("export NVML fixture: %s already exists (gpusnap never overwrites it)", path)
		}
		return fmt.Errorf("export NVML fixture: %w", err)
	}
	defer func() {
		if cerr := file.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("export NVML fixture: %w", cerr)
		}
		if err != nil {
			_ = os.Remove(path) // a half-written fixture would fail later, far from its cause
		}
	}()
	if err := WriteNVMLFixture(file, n); err != nil {
		return fmt.Errorf("export NVML fixture: %w", err)
	}
	return nil
}

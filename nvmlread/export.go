package nvmlread

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/gpusnap/gpusnap/internal/safefile"

	"github.com/gpusnap/gpusnap/snapshot"
)

// WriteFixture writes n in the NVML fixture format, so a state read on a
// host with GPUs replays on one without. Reading the fixture back gives n
// again (Source aside). Values NVML failed to give become the fixture's
// errors, and values it marked not available are left out, as NVML reports
// them.
func WriteFixture(w io.Writer, n snapshot.NVML) error {
	if err := exportable(n); err != nil {
		return err
	}
	f := nvmlFixture{
		DriverVersion:     n.DriverVersion,
		NVMLVersion:       n.NVMLVersion,
		CUDADriverVersion: n.CUDADriverVersion,
		Devices:           n.Devices,
	}
	if f.Devices == nil {
		f.Devices = []snapshot.GPU{}
	}
	for path, reason := range n.Missing {
		if name, ok := nvmlCodeByReason(reason); ok && errorPathRE().MatchString(path) {
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

func exportable(n snapshot.NVML) error {
	if n.Unavailable != "" {
		return fmt.Errorf("NVML was not read (%s): no state to export", n.Unavailable)
	}
	return nil
}

// ExportFixture writes n as a fixture to a new file at path, mode 0600.
// It never replaces an existing file nor follows a symlink planted at path.
func ExportFixture(ctx context.Context, path string, n snapshot.NVML) (err error) {
	if err := exportable(n); err != nil {
		return fmt.Errorf("export NVML fixture: %w", err) // before a file is created
	}
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("export NVML fixture: %s already exists (gpusnap never overwrites it)", path)
	}
	// The fixture is written whole or not at all, never through a symbolic
	// link, since a half-written one would fail later, far from its cause.
	if err := safefile.Create(ctx, path, 0o600, false, func(w io.Writer) error { return WriteFixture(w, n) }); err != nil {
		return fmt.Errorf("export NVML fixture: %w", err)
	}
	return nil
}

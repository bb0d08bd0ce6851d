package snapshot

import (
	"context"
	"time"
)

// Version is gpusnap's version, recorded in every snapshot; the CLI sets it.
var Version = "dev"

// Options say where a capture reads from.
type Options struct {
	ProcRoot string // a directory laid out like /proc; "" means /proc
	NVML     NVMLOptions
	Label    string
	Tenant   string
}

// Capture reads the host now.
// TODO(capture issue): the /proc walk.
func Capture(ctx context.Context, opts Options) (*Snapshot, error) {
	start := time.Now()
	s := &Snapshot{ID: NewID(start), Label: opts.Label, Tenant: opts.Tenant}
	s.Host.CaptureStart = start
	nv, err := ReadNVML(opts.NVML)
	if err != nil {
		return nil, err
	}
	s.NVML = nv
	s.Host.CaptureEnd = time.Now()
	return s, nil
}

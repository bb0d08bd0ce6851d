package bundle

import (
	"context"
	"io"

	"github.com/gpusnap/gpusnap/internal/safefile"
)

// WriteFile writes the bundle of in to the file name, whole or not at all
// (see safefile.Create).
func WriteFile(ctx context.Context, name string, in Input, force bool) (*Manifest, error) {
	var m *Manifest
	err := safefile.Create(ctx, name, 0o600, force, func(w io.Writer) error {
		var err error
		m, err = Write(w, in)
		return err
	})
	return m, err
}

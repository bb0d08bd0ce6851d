package bundle

import (
	"context"
	"io"
	"path/filepath"
	"strings"

	"github.com/gpusnap/gpusnap/internal/safefile"
)

// WriteFile writes the bundle of in to the file name, whole or not at all
// (see safefile.Create). The bag's directory is named after the file
// (incident-4242.tar.gz holds incident-4242/) unless in names it.
func WriteFile(ctx context.Context, name string, in Input, force bool) (*Written, error) {
	if in.Name == "" {
		in.Name = NameOf(name)
	}
	var m *Written
	err := safefile.Create(ctx, name, 0o600, force, func(w io.Writer) error {
		var err error
		m, err = Write(w, in)
		return err
	})
	return m, err
}

// NameOf is the bag directory of a bundle file, its base name without
// .tar.gz or .tgz, or DefaultName's when that is no valid name.
func NameOf(file string) string {
	base := filepath.Base(file)
	for _, ext := range []string{".tar.gz", ".tgz"} {
		base = strings.TrimSuffix(base, ext)
	}
	if !ValidName(base) {
		return ""
	}
	return base
}

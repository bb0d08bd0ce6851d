// Package bundle writes and verifies evidence bundles: one tar.gz an incident
// responder attaches to an incident, holding the two snapshots, the findings,
// human reports, each involved process's maps diff and the text capture kept
// of its files (the kernel's bytes, a byte that is not UTF-8 kept as U+FFFD),
// with a manifest of SHA-256 hashes and an optional ed25519
// signature. Anyone can check a bundle with `gpusnap verify`, or without
// gpusnap with `sha256sum -c SHA256SUMS` and openssl. docs/bundle.md has the layout.
package bundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"time"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/kmsg"
	"github.com/gpusnap/gpusnap/snapshot"
)

// Input is what goes into a bundle.
type Input struct {
	Before *snapshot.Snapshot // FROM: usually the tenant's baseline
	After  *snapshot.Snapshot // TO: usually the post snapshot
	// Result is the diff of Before and After. Its MapsDiffs (diff.Options.MapsDiff)
	// give maps/PID@START.diff; a process without one gets no such file.
	Result *diff.Result
	// Version is the version of the gpusnap writing the bundle.
	Version string
	// UID is the uid that ran gpusnap.
	UID int
	// TenantStart and TenantEnd place the tenant's job on the time line; zero
	// when not known.
	TenantStart, TenantEnd time.Time
	// Events is what gpusnap watch recorded between the snapshots, or nil:
	// the time line shows those of the processes the findings name.
	Events eventlog.Source
	// SignKey, when set, signs manifest.json into manifest.sig.
	SignKey ed25519.PrivateKey
	// KernelLog is the kernel log between Before and After (the diff's
	// window): its records go to raw/kmsg as the kernel wrote them. Nil: none.
	KernelLog *kmsg.Window
}

// Fixed file names in a bundle.
const (
	FileManifest  = "manifest.json"
	FileSignature = "manifest.sig"
	FileSums      = "SHA256SUMS"
	FileBefore    = "before.json"
	FileAfter     = "after.json"
	FileFindings  = "findings.json"
	FileReportMD  = "report.md"
	FileReportHTM = "report.html"
	DirMaps       = "maps"
	DirRaw        = "raw"
	FileKernelLog = "raw/kmsg"
)

// Write writes the bundle of in to w as a tar.gz and returns its manifest.
// The same Input always gives the same bytes.
func Write(w io.Writer, in Input) (*Manifest, error) {
	if in.Before == nil || in.After == nil || in.Result == nil {
		return nil, errors.New("bundle: before, after and the diff result are all needed")
	}
	files, err := payload(in)
	if err != nil {
		return nil, err
	}
	m := newManifest(in, files)
	manifestJSON, err := marshal(m)
	if err != nil {
		return nil, err
	}
	files[FileManifest] = manifestJSON
	files[FileSums] = sums(m.Files, manifestJSON)
	if in.SignKey != nil {
		files[FileSignature] = ed25519.Sign(in.SignKey, manifestJSON)
	}
	if err := writeArchive(w, files, archiveTime(in.After)); err != nil {
		return nil, err
	}
	return m, nil
}

// payload renders every file the manifest lists, by name.
func payload(in Input) (map[string][]byte, error) {
	files := map[string][]byte{}
	for name, v := range map[string]any{FileBefore: in.Before, FileAfter: in.After, FileFindings: in.Result} {
		b, err := marshal(v)
		if err != nil {
			return nil, err
		}
		files[name] = b
	}
	rep := newReport(in)
	files[FileReportMD] = rep.markdown()
	html, err := rep.html()
	if err != nil {
		return nil, err
	}
	files[FileReportHTM] = html

	for key, text := range in.Result.MapsDiffs {
		// A key names a file: anything but PID@START is refused, so no key
		// can climb out of its directory.
		if _, _, ok := snapshot.ParseProcessKey(key); !ok {
			return nil, fmt.Errorf("bundle: maps diff under %q: not a PID@START process identity", key)
		}
		files[path.Join(DirMaps, key+".diff")] = []byte(text)
	}
	for _, p := range rep.Processes {
		if p.Raw == nil {
			continue
		}
		dir := path.Join(DirRaw, p.Key)
		files[path.Join(dir, "maps")] = []byte(p.Raw.Maps)
		files[path.Join(dir, "status")] = []byte(p.Raw.Status)
		files[path.Join(dir, "cmdline")] = []byte(p.Raw.Cmdline)
		files[path.Join(dir, "cgroup")] = []byte(p.Raw.Cgroup)
	}
	if in.KernelLog != nil {
		var b bytes.Buffer
		for i := range in.KernelLog.Records {
			b.WriteString(in.KernelLog.Records[i].Line())
		}
		files[FileKernelLog] = b.Bytes()
	}
	return files, nil
}

func marshal(v any) ([]byte, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("bundle: %w", err)
	}
	return append(b, '\n'), nil
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// sums renders SHA256SUMS in sha256sum's own format: every payload file and
// manifest.json, so `sha256sum -c` checks the manifest too.
func sums(files []FileHash, manifestJSON []byte) []byte {
	lines := make([]FileHash, 0, len(files)+1)
	lines = append(lines, files...)
	lines = append(lines, FileHash{Name: FileManifest, SHA256: sha256Hex(manifestJSON)})
	sort.Slice(lines, func(i, j int) bool { return lines[i].Name < lines[j].Name })
	var b bytes.Buffer
	for _, f := range lines {
		fmt.Fprintf(&b, "%s  %s\n", f.SHA256, f.Name)
	}
	return b.Bytes()
}

// archiveTime is every entry's mtime: the end of the TO capture, so the same
// snapshots give the same bytes. A snapshot without a time gets the epoch.
func archiveTime(s *snapshot.Snapshot) time.Time {
	t := s.Host.CaptureEnd
	if t.IsZero() {
		t = s.Host.CaptureStart
	}
	if t.Before(time.Unix(0, 0)) {
		return time.Unix(0, 0).UTC()
	}
	return t.Truncate(time.Second).UTC()
}

// writeArchive writes files as a reproducible tar.gz: sorted names, each
// directory before its contents, fixed modes and owners, one mtime, and a
// gzip header without name or time.
func writeArchive(w io.Writer, files map[string][]byte, mtime time.Time) error {
	names := make([]string, 0, len(files))
	dirs := map[string]bool{}
	for name := range files {
		names = append(names, name)
		for d := path.Dir(name); d != "."; d = path.Dir(d) {
			if !dirs[d+"/"] {
				dirs[d+"/"] = true
				names = append(names, d+"/")
			}
		}
	}
	sort.Strings(names)

	gz, err := gzip.NewWriterLevel(w, gzip.BestCompression)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(gz)
	for _, name := range names {
		hdr := &tar.Header{Name: name, ModTime: mtime, Format: tar.FormatUSTAR}
		if dirs[name] {
			hdr.Typeflag, hdr.Mode = tar.TypeDir, 0o755
		} else {
			hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeReg, 0o644, int64(len(files[name]))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("bundle: %s: %w", name, err)
		}
		if _, err := tw.Write(files[name]); err != nil {
			return fmt.Errorf("bundle: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	if err := gz.Close(); err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	return nil
}

// Package bundle writes and verifies evidence bundles, one tar.gz per
// incident of the snapshots, findings, reports, maps diffs and the involved
// processes' files.
//
// The tarball is a BagIt bag (RFC 8493) with an in-toto Statement of its
// payload, DSSE-signed when a key is given. gpusnap verify checks it, as do
// sha256sum, a BagIt validator and a DSSE verifier (docs/bundle.md).
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
	"strings"
	"time"

	"github.com/gpusnap/gpusnap/diff"
	"github.com/gpusnap/gpusnap/eventlog"
	"github.com/gpusnap/gpusnap/kmsg"
	"github.com/gpusnap/gpusnap/render"
	"github.com/gpusnap/gpusnap/snapshot"
)

// Input is what goes into a bundle.
type Input struct {
	// Name is the bag's directory in the tarball, gpusnap-<TO's id> when
	// empty.
	Name   string
	Before *snapshot.Snapshot // FROM, usually the tenant's baseline
	After  *snapshot.Snapshot // TO, usually the post snapshot
	// Result is the diff of Before and After. Its MapsDiffs (diff.Options.MapsDiff)
	// give maps/PID@START.diff, and a process without one gets no such file.
	Result *diff.Result
	// Version is the version of the gpusnap writing the bundle.
	Version string
	// UID is the uid that ran gpusnap.
	UID int
	// TenantStart and TenantEnd place the tenant's job on the time line.
	// They are zero when not known.
	TenantStart, TenantEnd time.Time
	// Events is what gpusnap watch recorded between the snapshots, or nil.
	// The time line shows those of the processes the findings name.
	Events eventlog.Source
	// SignKey, when set, signs the statement into a DSSE envelope.
	SignKey ed25519.PrivateKey
	// KernelLog is the kernel log between Before and After (the diff's
	// window), or nil. Its records go to raw/kmsg as the kernel wrote them.
	KernelLog *kmsg.Window
	// Store is the store's log evidence of the two snapshots, or nil.
	Store *StoreEvidence
}

// Payload file names, under data/.
const (
	FileBefore    = "before.json"
	FileAfter     = "after.json"
	FileFindings  = "findings.json"
	FileReportMD  = "report.md"
	FileReportHTM = "report.html"
	DirMaps       = "maps"
	DirRaw        = "raw"
	FileKernelLog = "raw/kmsg"
)

// Written says what Write wrote, the statement's predicate, the bag's
// directory and how many payload files it holds.
type Written struct {
	Predicate *Predicate
	Bag       string
	Files     int
}

// Write writes the bundle of in to w as a tar.gz. The same Input always
// gives the same bytes.
func Write(w io.Writer, in Input) (*Written, error) {
	if in.Before == nil || in.After == nil || in.Result == nil {
		return nil, errors.New("bundle: before, after and the diff result are all needed")
	}
	name := in.Name
	if name == "" {
		name = DefaultName(in.After.ID)
	}
	if !ValidName(name) {
		return nil, fmt.Errorf("bundle: %q cannot name the bundle's directory", name)
	}
	files, err := payload(in)
	if err != nil {
		return nil, err
	}
	data := make(map[string][]byte, len(files))
	for n, b := range files {
		data[path.Join(DirPayload, n)] = b
	}
	pred := newPredicate(in, files[FileFindings])
	statement, err := statementJSON(data, pred)
	if err != nil {
		return nil, err
	}
	mtime := archiveTime(in.After)
	tags := map[string][]byte{
		FileBagIt:    []byte(bagitTxt),
		FileBagInfo:  bagInfo(in.Version, mtime.Format("2006-01-02"), in.After.ID, data),
		FileManifest: manifestText(data),
	}
	if in.SignKey != nil {
		if tags[FileEnvelope], err = envelopeJSON(statement, in.SignKey); err != nil {
			return nil, err
		}
	} else {
		tags[FileStatement] = append(statement, '\n')
	}
	tags[FileTagManifest] = manifestText(tags)
	all := make(map[string][]byte, len(data)+len(tags))
	for _, m := range []map[string][]byte{data, tags} {
		for n, b := range m {
			all[path.Join(name, n)] = b
		}
	}
	if err := writeArchive(w, all, mtime); err != nil {
		return nil, err
	}
	return &Written{Predicate: pred, Bag: name, Files: len(data)}, nil
}

// DefaultName is the bag directory of a bundle whose TO snapshot is id.
func DefaultName(id string) string { return "gpusnap-" + id }

// ValidName reports whether name can be the bag's directory, which is one
// path element of letters, digits and ._-+@, not starting with a dot.
func ValidName(name string) bool {
	if name == "" || len(name) > 200 || name[0] == '.' {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._-+@", r)) {
			return false
		}
	}
	return true
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
	pages, err := render.BundlePages(render.BundleInput{Before: in.Before, After: in.After, Result: in.Result,
		Version: in.Version, UID: in.UID, TenantStart: in.TenantStart, TenantEnd: in.TenantEnd, Events: in.Events,
		MapsDir: DirMaps, RawDir: DirRaw})
	if err != nil {
		return nil, err
	}
	files[FileReportMD] = pages.Markdown
	files[FileReportHTM] = pages.HTML

	for key, text := range in.Result.MapsDiffs {
		// A key names a file, so anything but PID@START is refused and no
		// key can climb out of its directory.
		if _, _, ok := snapshot.ParseProcessKey(key); !ok {
			return nil, fmt.Errorf("bundle: maps diff under %q: not a PID@START process identity", key)
		}
		files[path.Join(DirMaps, key+".diff")] = []byte(text)
	}
	for _, p := range pages.Processes {
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

// archiveTime is every entry's mtime, the end of the TO capture, so the
// same snapshots give the same bytes. A snapshot without a time gets the
// epoch.
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

// writeArchive writes files as a reproducible tar.gz, with sorted names,
// each directory before its contents, fixed modes and owners, one mtime,
// and a gzip header without name or time.
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

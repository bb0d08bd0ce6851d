package capture

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpusnap/gpusnap/bpf"
	"github.com/gpusnap/gpusnap/internal/safefile"
	"github.com/gpusnap/gpusnap/internal/safepath"
	"github.com/gpusnap/gpusnap/snapshot"
)

// The refusal record (docs/snapshot.md, "A refused BPF path") is how auto
// remembers, in a small file beside the store, that the kernel refused the
// capture iterators for good (bpf.Refused). Later captures then read /proc
// at once instead of paying for a load refused again (its cost is in
// docs/performance-notes.md, "The process cache against the floor"). The
// record holds for one boot, kernel, program build and set of credentials.

// refusal is the record, as stored (JSON).
type refusal struct {
	BootID        string `json:"boot_id"`
	KernelRelease string `json:"kernel_release"`
	// Programs is bpf.CaptureBuild, since a newer gpusnap's programs may load.
	Programs string `json:"programs"`
	// Credentials are who was refused (refusalCredentials). Root in a
	// container without CAP_BPF is refused what the host's root is not.
	Credentials string    `json:"credentials"`
	Reason      string    `json:"reason"`
	At          time.Time `json:"at"`
}

// A record is a few hundred bytes, so anything far larger is not one and is
// not read. A reason is cut to reasonLimit before it is written.
const (
	refusalLimit = 16 << 10
	reasonLimit  = 4 << 10
)

// refusalMemory reads and writes one capture's refusal record. A nil
// memory remembers nothing, and auto tries BPF every time.
type refusalMemory struct {
	path string
	// runtime is the record used before the store's directory exists
	// (Options.RuntimeRefusalRecord), or "" for none.
	runtime string
	host    *snapshot.Host
	warn    func(string)
	// key is what a record must hold to apply here (Reason and At unset),
	// made when first wanted so that the /proc path pays nothing for it.
	// keyErr says why there is none (an unreadable boot id), and then no
	// record is trusted or written.
	key    *refusal
	keyErr error
	// seen is the record recall found and trusted, matching or not, and
	// seenPath where, the store's or the runtime one before the store.
	seen     *refusal
	seenPath string
}

// newRefusalMemory is the memory of opts.RefusalRecord for the host h.
func newRefusalMemory(opts Options, h *snapshot.Host) *refusalMemory {
	if opts.RefusalRecord == "" {
		return nil
	}
	return &refusalMemory{path: opts.RefusalRecord, runtime: opts.RuntimeRefusalRecord, host: h, warn: opts.Warn}
}

// keyed makes the key, once, and reports whether there is one.
func (m *refusalMemory) keyed() bool {
	if m.key == nil && m.keyErr == nil {
		h := m.host
		creds, err := refusalCredentials()
		switch {
		case h.BootID == "" || h.KernelRelease == "":
			m.keyErr = errors.New("the boot id or kernel release is unknown")
		case err != nil:
			m.keyErr = fmt.Errorf("own credentials: %w", err)
		default:
			m.key = &refusal{BootID: h.BootID, KernelRelease: h.KernelRelease, Programs: bpf.CaptureBuild(), Credentials: creds}
		}
	}
	return m.key != nil
}

// recall returns the record's refusal where one applies to this capture and
// is trusted, else nil. An untrusted record (not a regular file, not the
// caller's, writable by others, damaged) is never obeyed. It is reported on
// Warn and in scan's errors, and BPF is tried. A stale one is ignored too,
// and replaced if BPF is refused again.
func (m *refusalMemory) recall(scan *snapshot.Scan) *refusal {
	if m == nil || !m.keyed() {
		return nil
	}
	path := m.recordPath()
	if path == "" {
		return nil
	}
	rec, err := readRefusal(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		line := "BPF refusal record ignored (the BPF capture is tried): " + err.Error()
		scan.Errors = append(scan.Errors, line)
		if m.warn != nil {
			m.warn(line)
		}
		return nil
	}
	m.seen, m.seenPath = &rec, path
	k := *m.key
	if rec.BootID != k.BootID || rec.KernelRelease != k.KernelRelease || rec.Programs != k.Programs || rec.Credentials != k.Credentials {
		return nil
	}
	return &rec
}

// note is the capture note's account of a remembered refusal.
func (m *refusalMemory) note(r *refusal) string {
	return fmt.Sprintf("%s (remembered from %s in %s: not tried again until a reboot, another kernel or gpusnap, or --capture bpf)",
		r.Reason, r.At.UTC().Format(time.RFC3339), m.seenPath)
}

// remember writes the record of reason, the kernel's refusal, where
// recordPath says. It is replaced whole, never written through a link
// (safefile.Create), and the runtime record's directory is made as needed.
func (m *refusalMemory) remember(ctx context.Context, reason string) error {
	if m == nil {
		return nil
	}
	if !m.keyed() {
		return m.keyErr
	}
	path := m.recordPath()
	if path == "" {
		return nil
	}
	if path == m.runtime {
		if err := os.Mkdir(filepath.Dir(path), 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	rec := *m.key
	if len(reason) > reasonLimit {
		reason = strings.ToValidUTF8(reason[:reasonLimit], "")
	}
	rec.Reason, rec.At = reason, time.Now().UTC()
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return safefile.Create(ctx, path, 0o600, true, func(w io.Writer) error {
		_, err := w.Write(append(data, '\n'))
		return err
	})
}

// recordPath is the record's file, beside the store, or before the store's
// directory exists the runtime one ("" where there is none).
func (m *refusalMemory) recordPath() string {
	if _, err := os.Stat(filepath.Dir(m.path)); errors.Is(err, fs.ErrNotExist) {
		return m.runtime
	}
	return m.path
}

// forget removes the trusted record once BPF loaded after all, where the
// load proves it wrong or old. That is this caller's own record once
// --capture bpf went past it (a policy changed), or a record of another
// boot or kernel. Another caller's refusal this boot still stands, and
// stays.
func (m *refusalMemory) forget() {
	if m == nil || m.seen == nil {
		return
	}
	r, k := m.seen, *m.key
	if r.BootID != k.BootID || r.KernelRelease != k.KernelRelease || r.Credentials == k.Credentials {
		_ = os.Remove(m.seenPath)
	}
}

// readRefusal reads the record at path, trusting only a regular file of the
// caller's own that nobody else can write, reached through no link another
// user owns (safepath). A record another user could plant is never trusted. A
// missing record is fs.ErrNotExist.
func readRefusal(path string) (refusal, error) {
	euid := uint32(os.Geteuid())
	resolved, err := safepath.Resolve(path, euid)
	if err != nil {
		return refusal{}, fmt.Errorf("%s: %w", path, err)
	}
	// Looked at before it is opened (a file of another user may not open at
	// all, to a root without CAP_DAC_OVERRIDE), and again once open, so
	// that what is read is what was checked.
	fi, err := os.Lstat(resolved)
	if err != nil {
		return refusal{}, err
	}
	if err := trustedRecord(path, fi, euid); err != nil {
		return refusal{}, err
	}
	f, err := safefile.Open(resolved)
	if err != nil {
		return refusal{}, err
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return refusal{}, err
	}
	if err := trustedRecord(path, fi, euid); err != nil {
		return refusal{}, err
	}
	data, err := io.ReadAll(io.LimitReader(f, refusalLimit+1))
	if err != nil {
		return refusal{}, err
	}
	var rec refusal
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil || dec.More() || len(data) > refusalLimit {
		return refusal{}, fmt.Errorf("%s: not a refusal record", path)
	}
	if rec.BootID == "" || rec.KernelRelease == "" || rec.Programs == "" || rec.Credentials == "" || rec.Reason == "" || rec.At.IsZero() {
		return refusal{}, fmt.Errorf("%s: a refusal record with fields missing", path)
	}
	return rec, nil
}

// trustedRecord says why the file fi at path is no record of euid's own, or nil.
func trustedRecord(path string, fi fs.FileInfo, euid uint32) error {
	switch owner := safepath.Owner(fi); {
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s: %w (%s)", path, safefile.ErrNotRegular, safefile.TypeName(fi.Mode()))
	case owner != euid:
		return fmt.Errorf("%s is owned by uid %d, not %d", path, owner, euid)
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("%s is writable by its group or others (mode %04o)", path, fi.Mode().Perm())
	case fi.Size() > refusalLimit:
		return fmt.Errorf("%s: %d bytes, more than a record's %d", path, fi.Size(), refusalLimit)
	}
	return nil
}

// refusalCredentials names what decides, besides the kernel, whether this
// process may load the capture programs. That is its uids, effective
// capabilities, seccomp mode and user namespace (/proc/self/status,
// /proc/self/ns/user).
func refusalCredentials() (string, error) {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "", err
	}
	var parts []string
	for _, field := range []string{"Uid", "CapEff", "Seccomp"} {
		v, ok := statusField(status, field)
		if !ok {
			return "", fmt.Errorf("/proc/self/status has no %s", field)
		}
		parts = append(parts, field+" "+v)
	}
	userNS, err := os.Readlink("/proc/self/ns/user")
	if err != nil {
		return "", err
	}
	return strings.Join(append(parts, userNS), ", "), nil
}

// statusField is the value of "NAME:\tVALUE" in a status file, its tabs
// made single spaces.
func statusField(status []byte, name string) (string, bool) {
	for line := range bytes.SplitSeq(status, []byte{'\n'}) {
		if v, ok := bytes.CutPrefix(line, []byte(name+":")); ok {
			return strings.Join(strings.Fields(string(v)), " "), true
		}
	}
	return "", false
}

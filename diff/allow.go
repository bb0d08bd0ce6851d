package diff

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/gpusnap/gpusnap/internal/safefile"
	"github.com/gpusnap/gpusnap/provenance"
	"github.com/gpusnap/gpusnap/snapshot"
)

// AllowList is the expected workloads of --allow FILE, whose findings are
// downgraded to info. Each line is one entry of space-separated FIELD=PATTERN
// pairs, matching a finding when every pattern does. A pattern is a glob (*
// any run, slashes included, ? one character), a value with spaces is
// double-quoted, and blank and # lines are skipped; docs/diff.md has
// examples.
type AllowList struct {
	entries []allowEntry
	// Weak names each entry whose exe pattern reaches outside the
	// directories only packages install into and that pins no sha256: a
	// tenant's binary at such a path (or bound over it) passes it.
	Weak []string
}

type allowEntry struct {
	where  string // FILE:LINE
	text   string // the entry as written
	fields []allowField
	// hostOnly: the entry names an exe and no cgroup, container or pod, so
	// it speaks of the host's program: a process in a container's or a
	// pod's cgroup, or in another mount namespace, whose paths are another
	// root's, is not it.
	hostOnly bool
}

type allowField struct {
	name    string
	pattern string
	re      *regexp.Regexp
}

// allowFields are the fields an entry may name, each giving the values of a
// finding's process, or of the finding itself, that its pattern is tried on.
// A process field never matches a finding that names no process.
var allowFields = map[string]func(f *Finding, p *snapshot.Process) []string{
	// exe matches the path /proc/PID/exe names, except where the file run is
	// not the package's file at that path (a tenant can bind its own binary
	// over an allowed path), or where the process runs code the file does
	// not vouch for (an LD_PRELOAD library's constructor).
	"exe": processField(func(p *snapshot.Process) []string {
		if p.Package != nil && p.Package.Status == provenance.Modified || len(p.RunsForeignCode()) > 0 {
			return nil
		}
		return []string{p.Exe}
	}),
	"comm": processField(func(p *snapshot.Process) []string { return []string{p.Comm} }),
	// user matches the user name or the numeric uid.
	"user": processField(func(p *snapshot.Process) []string { return []string{p.User, strconv.Itoa(p.UID)} }),
	// cgroup matches the path of any of the process's cgroup lines.
	"cgroup": processField(func(p *snapshot.Process) []string {
		var paths []string
		for _, line := range p.Cgroups {
			if parts := strings.SplitN(line, ":", 3); len(parts) == 3 {
				paths = append(paths, parts[2])
			}
		}
		return paths
	}),
	"container": ownerField(snapshot.OwnerContainer),
	"pod":       ownerField(snapshot.OwnerPod),
	"slurm_job": ownerField(snapshot.OwnerSlurmJob),
	"kind":      func(f *Finding, _ *snapshot.Process) []string { return []string{f.Kind} },
	// device matches the path a finding names, except where the process
	// has a node there whose number names another device (misnamed).
	"device": func(f *Finding, p *snapshot.Process) []string {
		if misnamed(p, f.Device) {
			return nil
		}
		return []string{f.Device}
	},
	"gpu": func(f *Finding, _ *snapshot.Process) []string { return []string{f.GPUUUID} },
	// sha256 matches the SHA-256 of the file the process runs, as the
	// capture read it: it pins an exe no package installed (/opt/...),
	// which dpkg cannot vouch for.
	"sha256": processField(func(p *snapshot.Process) []string {
		if p.HashStatus != snapshot.HashOK {
			return nil
		}
		return []string{p.ExeSHA256}
	}),
}

// weakExe reports whether an entry's exe pattern may match a path outside
// snapshot.SystemDirs, where dpkg's checksums vouch for the file, and the
// entry pins no sha256.
func (e *allowEntry) weakExe() bool {
	if e.names("sha256") {
		return false
	}
	for _, f := range e.fields {
		if f.name != "exe" {
			continue
		}
		if !snapshot.InSystemDir(f.pattern) {
			return true
		}
	}
	return false
}

// misnamed reports whether p holds or maps, at path, an NVIDIA node (major
// 195) whose number is not the one its name says: nvidiaN is 195:N,
// nvidia-modeset 195:254, nvidiactl 195:255. In a mount namespace of its
// own a tenant can bind any node over any name.
func misnamed(p *snapshot.Process, path string) bool {
	if p == nil {
		return false
	}
	wrong := func(devType string, devno snapshot.DeviceNumber) bool {
		if devType != "char" || devno.Major != snapshot.NVIDIAMajor {
			return false
		}
		want := "nvidia" + strconv.Itoa(int(devno.Minor))
		switch devno.Minor {
		case 254:
			want = "nvidia-modeset"
		case 255:
			want = "nvidiactl"
		}
		return filepath.Base(path) != want
	}
	for _, h := range p.Holders {
		if h.Target == path && wrong(h.DeviceType, h.DeviceNumber) {
			return true
		}
	}
	for _, m := range p.Mappings {
		if m.Path == path && wrong(m.DeviceType, m.DeviceNumber) {
			return true
		}
	}
	return false
}

func processField(get func(*snapshot.Process) []string) func(*Finding, *snapshot.Process) []string {
	return func(_ *Finding, p *snapshot.Process) []string {
		if p == nil {
			return nil
		}
		return get(p)
	}
}

// ownerField is a container, pod or Slurm job id of the process, where
// the owner rule vouches for it (snapshot.Process.VerifiedOwner): an id a
// tenant could have named itself matches no entry.
func ownerField(kind string) func(*Finding, *snapshot.Process) []string {
	return processField(func(p *snapshot.Process) []string {
		return []string{p.VerifiedOwner(kind)}
	})
}

// DefaultAllowPath is the allow list the package installs (NVIDIA's own
// daemons), which --allow reads where it is not given.
const DefaultAllowPath = "/etc/gpusnap/allow.list"

// maxAllowSize bounds an allow list file: thousands of entries fit in 1 MiB.
const maxAllowSize = 1 << 20

// LoadAllow reads an allow list file: a regular file, at most maxAllowSize.
func LoadAllow(path string) (*AllowList, error) {
	data, err := safefile.ReadFile(path, maxAllowSize)
	if err != nil {
		return nil, fmt.Errorf("allow list: %w", err)
	}
	return ParseAllow(bytes.NewReader(data), path)
}

// ParseAllow reads an allow list; name is used in error messages and in Finding.Allowed.
func ParseAllow(r io.Reader, name string) (*AllowList, error) {
	a := &AllowList{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		e, err := parseAllowEntry(text)
		if err != nil {
			return nil, fmt.Errorf("allow list %s:%d: %w", name, n, err)
		}
		e.where = fmt.Sprintf("%s:%d", name, n)
		a.entries = append(a.entries, e)
		if e.weakExe() {
			a.Weak = append(a.Weak, e.where+": "+e.text)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("allow list %s: %w", name, err)
	}
	return a, nil
}

func parseAllowEntry(text string) (allowEntry, error) {
	e := allowEntry{text: text}
	rest := text
	for rest = strings.TrimLeft(rest, " \t"); rest != ""; rest = strings.TrimLeft(rest, " \t") {
		name, value, ok := strings.Cut(rest, "=")
		if !ok || name == "" || strings.ContainsAny(name, " \t") {
			return e, fmt.Errorf("want FIELD=PATTERN, got %q", firstWord(rest))
		}
		if allowFields[name] == nil {
			return e, fmt.Errorf("unknown field %q (want exe, sha256, comm, user, cgroup, container, pod, slurm_job, kind, device or gpu)", name)
		}
		var pattern string
		if strings.HasPrefix(value, `"`) {
			quoted, err := strconv.QuotedPrefix(value)
			if err != nil {
				return e, fmt.Errorf("field %s: unterminated or bad quoted value", name)
			}
			pattern, _ = strconv.Unquote(quoted)
			rest = value[len(quoted):]
			if rest != "" && rest[0] != ' ' && rest[0] != '\t' {
				return e, fmt.Errorf("field %s: want a space after the quoted value", name)
			}
		} else {
			end := strings.IndexAny(value, " \t")
			if end < 0 {
				end = len(value)
			}
			pattern, rest = value[:end], value[end:]
		}
		if pattern == "" {
			return e, fmt.Errorf("field %s has an empty pattern", name)
		}
		e.fields = append(e.fields, allowField{name: name, pattern: pattern, re: globRegexp(pattern)})
	}
	if len(e.fields) == 0 {
		return e, errors.New("empty entry")
	}
	e.hostOnly = e.names("exe") && !e.names("cgroup") && !e.names("container") && !e.names("pod")
	return e, nil
}

func firstWord(s string) string {
	w, _, _ := strings.Cut(s, " ")
	return w
}

// globRegexp compiles a glob: * any run of characters, ? one character,
// everything else literal.
func globRegexp(glob string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString(`^`)
	for _, r := range glob {
		switch r {
		case '*':
			b.WriteString(`.*`)
		case '?':
			b.WriteString(`.`)
		default:
			b.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	b.WriteString(`$`)
	return regexp.MustCompile(b.String())
}

// match returns the first entry that matches the finding, or nil.
func (a *AllowList) match(f *Finding, p *snapshot.Process) *allowEntry {
	for i := range a.entries {
		e := &a.entries[i]
		if e.matches(f, p) {
			return e
		}
	}
	return nil
}

// names reports whether the entry has a pattern for field.
func (e *allowEntry) names(field string) bool {
	return slices.ContainsFunc(e.fields, func(f allowField) bool { return f.name == field })
}

func (e *allowEntry) matches(f *Finding, p *snapshot.Process) bool {
	if e.hostOnly && p != nil && (p.ContainerID != "" || p.PodUID != "" || p.ForeignCode != nil && p.ForeignCode.OtherMountNamespace) {
		return false
	}
	for _, fld := range e.fields {
		hit := false
		for _, v := range allowFields[fld.name](f, p) {
			if fld.re.MatchString(v) {
				hit = true
				break
			}
		}
		if !hit {
			return false
		}
	}
	return true
}

// applyAllow downgrades the findings of expected workloads to info.
func (c *comparison) applyAllow(findings []Finding) {
	if c.opts.Allow == nil {
		return
	}
	for i := range findings {
		f := &findings[i]
		// What a hidden PID of unknown start time holds is unknown: no
		// entry may vouch for it.
		if f.Kind == KindHiddenProcess && f.Process != nil && f.Process.StartTime == 0 {
			continue
		}
		// A PID NVML lists with no process behind it has no process fields
		// to match: only entries naming no process field can allow it.
		var p *snapshot.Process
		if f.Process != nil {
			key := idOf(f.Process.PID, f.Process.StartTime)
			s := c.to
			if p = c.toByKey[key]; p == nil {
				p, s = c.fromByKey[key], c.from
			}
			p = codeNotRead(p, s)
		}
		if e := c.opts.Allow.match(f, p); e != nil {
			f.Severity = Info
			f.Allowed = e.where + ": " + e.text
		}
	}
}

// codeNotRead is p as the allow list weighs it. Where p's capture read
// foreign code but not p's (a process that maps no device and was read in
// full, such as one whose device use only the event log shows), what p
// runs beside its exe is not known, and no exe entry vouches for it.
func codeNotRead(p *snapshot.Process, s *snapshot.Snapshot) *snapshot.Process {
	if p == nil || s == nil || !s.Scan.CodeRead || p.ForeignCode != nil {
		return p
	}
	q := *p
	q.ForeignCode = &snapshot.ForeignCode{Unread: []string{"its code: the capture reads it for a process that uses or maps a device, or could not be read, alone"}}
	return &q
}

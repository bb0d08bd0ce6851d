package procfs

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"

	"github.com/gpusnap/gpusnap/snapshot"
)

// /proc/PID/maps has one line per mapping (proc(5)), such as
//
//	7f2c0a200000-7f2c0a400000 rw-s 00000000 00:06 1043       /dev/nvidia0
//
// procfs ProcMaps is not used. It allocates per line, collapses spaces in
// paths and ignores read errors. ScanMaps filters lines by cheap byte checks
// first and parses only the device and anonymous executable ones (bench/
// measures both, docs/performance.md has the figures).

// PathMax is PATH_MAX. The longest path the kernel renders for readlink and
// d_path is one byte shorter.
const PathMax = 4096

// suspectAnonSize is the size from which an anonymous executable mapping is
// suspect, as CUDA driver allocations look like this.
const suspectAnonSize = 64 << 20

// MapsLine is one parsed line of /proc/PID/maps. Path aliases the input.
type MapsLine struct {
	Start, End uint64
	Perms      [4]byte // r/-, w/-, x/-, s/p
	Offset     uint64
	DevMajor   uint32 // the maps dev field, the filesystem holding the file
	DevMinor   uint32
	Inode      uint64
	Path       []byte // without " (deleted)"
	Deleted    bool
}

// errMapsLine is wrapped by every parse error of a maps line.
var errMapsLine = errors.New("malformed maps line")

// ParseMapsLine parses one maps line (without its newline). It does not
// allocate on success. The path is everything after the inode field and the
// kernel's padding. d_path always starts with '/' or '[' (or is empty for an
// anonymous mapping), so skipping spaces never eats part of a name, and spaces
// inside the path are kept as they are.
func ParseMapsLine(line []byte) (MapsLine, error) {
	var m MapsLine
	rest := line
	addr, rest, ok := cutField(rest)
	if !ok {
		return m, fmt.Errorf("%w: no fields after the address", errMapsLine)
	}
	dash := bytes.IndexByte(addr, '-')
	if dash < 0 {
		return m, fmt.Errorf("%w: address %q has no '-'", errMapsLine, addr)
	}
	if m.Start, ok = parseHex(addr[:dash]); !ok {
		return m, fmt.Errorf("%w: bad start address %q", errMapsLine, addr[:dash])
	}
	if m.End, ok = parseHex(addr[dash+1:]); !ok {
		return m, fmt.Errorf("%w: bad end address %q", errMapsLine, addr[dash+1:])
	}
	if m.End < m.Start {
		return m, fmt.Errorf("%w: end %#x before start %#x", errMapsLine, m.End, m.Start)
	}
	perms, rest, ok := cutField(rest)
	if !ok || !validPerms(perms) {
		return m, fmt.Errorf("%w: bad permissions %q", errMapsLine, perms)
	}
	copy(m.Perms[:], perms)
	off, rest, ok := cutField(rest)
	if !ok {
		return m, fmt.Errorf("%w: no fields after the offset", errMapsLine)
	}
	if m.Offset, ok = parseHex(off); !ok {
		return m, fmt.Errorf("%w: bad offset %q", errMapsLine, off)
	}
	dev, rest, ok := cutField(rest)
	if !ok {
		return m, fmt.Errorf("%w: no inode field", errMapsLine)
	}
	if m.DevMajor, m.DevMinor, ok = parseDev(dev); !ok {
		return m, fmt.Errorf("%w: bad dev field %q", errMapsLine, dev)
	}
	ino, rest, _ := cutField(rest)
	if m.Inode, ok = ParseDec(ino); !ok {
		return m, fmt.Errorf("%w: bad inode %q", errMapsLine, ino)
	}
	m.Path, m.Deleted = CutDeleted(trimLeftSpaces(rest))
	return m, nil
}

// cutField returns the text before the next space and what follows it. ok
// is false when there is no space (the line ends in this field).
func cutField(b []byte) (field, rest []byte, ok bool) {
	i := bytes.IndexByte(b, ' ')
	if i < 0 {
		return b, nil, false
	}
	return b[:i], b[i+1:], true
}

func trimLeftSpaces(b []byte) []byte {
	for len(b) > 0 && b[0] == ' ' {
		b = b[1:]
	}
	return b
}

var deletedSuffix = []byte(" (deleted)")

func CutDeleted(path []byte) ([]byte, bool) {
	if bytes.HasSuffix(path, deletedSuffix) {
		return path[:len(path)-len(deletedSuffix)], true
	}
	return path, false
}

func validPerms(p []byte) bool {
	return len(p) == 4 &&
		(p[0] == 'r' || p[0] == '-') &&
		(p[1] == 'w' || p[1] == '-') &&
		(p[2] == 'x' || p[2] == '-') &&
		(p[3] == 's' || p[3] == 'p')
}

func parseHex(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 16 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		v = v<<4 | uint64(c)
	}
	return v, true
}

// ParseDec reads b as an unsigned decimal of at most 20 digits, with no sign.
func ParseDec(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (^uint64(0)-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}

// parseDev parses a maps dev field, hex major:minor.
func parseDev(b []byte) (major, minor uint32, ok bool) {
	i := bytes.IndexByte(b, ':')
	if i < 0 {
		return 0, 0, false
	}
	ma, ok1 := parseHex(b[:i])
	mi, ok2 := parseHex(b[i+1:])
	if !ok1 || !ok2 || ma > 0xffffffff || mi > 0xffffffff {
		return 0, 0, false
	}
	return uint32(ma), uint32(mi), true
}

// MapsScanner finds the device mappings and the suspect anonymous executable
// mappings in the text of a maps file.
type MapsScanner struct {
	// Stat stats the file behind a mapping (stat of /proc/PID/map_files/NAME,
	// NAME as mapFilesName gives it), whose path is as maps writes it. ok is
	// false when it could not be read, and the path rule then decides. Nil
	// means no stat at all (only the path rule).
	Stat func(name, path []byte, devMajor, devMinor uint32, inode uint64) (kind snapshot.FileKind, ok bool)
	// Known, with Stat, answers for a file Stat has already stat'ed (by its
	// path, maps dev field and inode) without a name, so that a line of a
	// file known to be no device is dismissed before it is parsed. Nil asks Stat.
	Known func(path []byte, devMajor, devMinor uint32, inode uint64) (kind snapshot.FileKind, ok bool)
	// Classes decides NVIDIA or other for a device.
	Classes snapshot.DeviceClasses

	nameBuf []byte // the map_files name of the line being stat'ed

	// The state of a scan, from Begin to End.
	res   MapsResult
	other []snapshot.Mapping // device mappings of other devices, after NVIDIA's
	runs  MappingRuns
	anon  SuspectAnon
	// lastFile and lastPath are the "dev inode" and path of the last file
	// found not to be a device. Inode numbers repeat under one maps dev
	// (overlayfs layers, btrfs subvolumes), so the path must match too.
	lastFile, lastPath []byte
	lineNo             int
	errs               int // malformed lines
}

// Bounds of what one process's maps may cost, whatever a tenant maps.
const (
	maxKeptMappings = 4 * snapshot.MappingsPerDevice // every device together
	MaxRuns         = 64                             // devices with a run of their own, the rest sharing one
	MaxMapsErrors   = 16                             // malformed lines named one by one
)

// deviceRun is what ScanMaps has seen of one device (one file by dev and
// inode, with its path) in the maps being scanned.
type deviceRun struct {
	devIno []byte // the maps "dev inode" text
	path   []byte // as maps writes it, " (deleted)" and all
	kept   int
	perms  []string // kept so far, each once
	run    snapshot.MappingRun
}

// MappingRuns is the one rule, for both capture paths, of what a process's
// device mappings may cost. Per device the first MappingsPerDevice lines are
// kept, then (or past maxKeptMappings) only a line of permissions not yet
// kept, so a writable mapping among 100,000 read-only ones is seen. The rest
// are counted in the device's run, devices past MaxRuns sharing one.
type MappingRuns struct {
	runs []deviceRun
	kept int // device lines kept, every device together
}

func (m *MappingRuns) Reset() { m.runs, m.kept = m.runs[:0], 0 }

// Counted counts the line of a device mapping (its file's id and path, as
// maps writes it, its permissions, and its size, which is that of the maps
// address range addr, parsed only when needed, or, with no addr, size) in
// its device's run when it is not to be kept, and reports whether it was.
func (m *MappingRuns) Counted(id, path, perms, addr []byte, size uint64) bool {
	if len(m.runs) == 0 {
		return false
	}
	r := m.find(id, path)
	if r == nil || (r.kept < snapshot.MappingsPerDevice && m.kept < maxKeptMappings) || !r.sawPerms(perms) {
		return false
	}
	if addr != nil {
		start, end, ok := parseRange(addr)
		if !ok {
			return false // parsed in full, and reported, by the caller
		}
		size = end - start
	}
	r.Count(size, perms)
	return true
}

// Keep records a device line kept one by one.
func (m *MappingRuns) Keep(id, path, perms []byte, class string, gpuMinor *int) {
	r := m.run(id, path)
	if r.kept == 0 {
		r.run.Class, r.run.GPUMinor = class, gpuMinor
	}
	if !r.sawPerms(perms) {
		r.perms = append(r.perms, string(perms))
	}
	r.kept++
	m.kept++
}

// Result is the runs of lines not kept.
func (m *MappingRuns) Result() []snapshot.MappingRun {
	var out []snapshot.MappingRun
	for i := range m.runs {
		if m.runs[i].run.Lines > 0 {
			out = append(out, m.runs[i].run)
		}
	}
	return out
}

func (m *MappingRuns) find(id, path []byte) *deviceRun {
	for i := range m.runs {
		if bytes.Equal(m.runs[i].devIno, id) && bytes.Equal(m.runs[i].path, path) {
			return &m.runs[i]
		}
	}
	if len(m.runs) > MaxRuns {
		return &m.runs[MaxRuns] // the run shared by the devices past MaxRuns
	}
	return nil
}

func (m *MappingRuns) run(id, path []byte) *deviceRun {
	if r := m.find(id, path); r != nil {
		return r
	}
	if len(m.runs) == MaxRuns {
		m.runs = append(m.runs, deviceRun{})
		return &m.runs[MaxRuns]
	}
	// The run keeps copies, since a scan fed in pieces outlives each piece.
	// They go into the buffers a slot had before the last reset, because
	// runs are reset for every process and nearly every process holds a
	// device (/dev/null, a tty).
	if len(m.runs) == cap(m.runs) {
		m.runs = append(m.runs, deviceRun{})
	} else {
		m.runs = m.runs[:len(m.runs)+1]
	}
	r := &m.runs[len(m.runs)-1]
	*r = deviceRun{devIno: append(r.devIno[:0], id...), path: append(r.path[:0], path...), perms: r.perms[:0]}
	r.run.Path, _ = CutDeletedString(string(path))
	return r
}

// Count counts a line not kept.
func (r *deviceRun) Count(size uint64, perms []byte) { countLine(&r.run, size, perms) }

// countLine counts a line not kept in run r.
func countLine(r *snapshot.MappingRun, size uint64, perms []byte) {
	r.Lines++
	r.Bytes += size
	for _, p := range r.Perms {
		if p == string(perms) {
			return
		}
	}
	r.Perms = append(r.Perms, string(perms))
}

// SuspectAnon keeps a process's suspect anonymous executable mappings, for
// both capture paths. The first MappingsPerDevice are kept one by one, the
// rest counted in a run of class anon_exec (a tenant can make tens of
// thousands, 64 MiB of address space each).
type SuspectAnon struct {
	Kept []snapshot.Mapping
	run  snapshot.MappingRun
}

// Full reports whether the next mapping is counted, not kept.
func (a *SuspectAnon) Full() bool { return len(a.Kept) >= snapshot.MappingsPerDevice }

func (a *SuspectAnon) Keep(m snapshot.Mapping) { a.Kept = append(a.Kept, m) }

func (a *SuspectAnon) Count(size uint64, perms []byte) {
	a.run.Class = snapshot.ClassAnonExec
	countLine(&a.run, size, perms)
}

// Counted is the run of the mappings not kept, or nil.
func (a *SuspectAnon) Counted() *snapshot.MappingRun {
	if a.run.Lines == 0 {
		return nil
	}
	r := a.run
	return &r
}

func (r *deviceRun) sawPerms(perms []byte) bool {
	for _, p := range r.perms {
		if p == string(perms) {
			return true
		}
	}
	return false
}

// MapsResult is what ScanMaps found in one maps text.
type MapsResult struct {
	Mappings    []snapshot.Mapping    // device mappings, NVIDIA first, then other, each in address order
	SuspectAnon []snapshot.Mapping    // anonymous executable mappings of 64 MiB or more, the first MappingsPerDevice
	AnonRun     *snapshot.MappingRun  // those past them, counted
	Runs        []snapshot.MappingRun // device lines not kept one by one, per device
	Errors      []string              // malformed lines, by line number (the first few)
}

// ScanMaps scans the text of a maps file. Most lines (libraries, heap, stack)
// are dismissed by byte checks on the permissions and path before anything
// is parsed or allocated, and only candidate lines are parsed (and
// validated) in full. Every line must at least have an address and permissions.
func (s *MapsScanner) ScanMaps(data []byte) MapsResult {
	s.Begin()
	s.Feed(data)
	return s.End()
}

// Begin starts a scan fed in pieces. Feed each piece of the text, cut at
// line ends, in order, then End. A maps file of a tenant's 100,000 mappings
// is scanned as it is read, in bounded memory.
func (s *MapsScanner) Begin() {
	s.res, s.other = MapsResult{}, nil
	s.runs.Reset()
	s.anon = SuspectAnon{}
	s.lastFile, s.lastPath = s.lastFile[:0], s.lastPath[:0]
	s.lineNo, s.errs = 0, 0
}

// End finishes a scan and returns what it found.
func (s *MapsScanner) End() MapsResult {
	res := s.res
	if s.errs > MaxMapsErrors {
		res.Errors = append(res.Errors, fmt.Sprintf("maps: %d more malformed lines", s.errs-MaxMapsErrors))
	}
	res.Runs = s.runs.Result()
	res.SuspectAnon, res.AnonRun = s.anon.Kept, s.anon.Counted()
	res.Mappings = append(res.Mappings, s.other...)
	s.res, s.other = MapsResult{}, nil
	return res
}

func (s *MapsScanner) malformed(text string) {
	if s.errs++; s.errs <= MaxMapsErrors {
		s.res.Errors = append(s.res.Errors, text)
	}
}

// Feed scans the lines of data, and a last line without its newline counts
// as a whole line. Nothing found keeps a reference to data.
func (s *MapsScanner) Feed(data []byte) {
	for len(data) > 0 {
		s.lineNo++
		var line []byte
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			line, data = data, nil
		}
		// Every line must have an address, then permissions.
		sp := bytes.IndexByte(line, ' ')
		if sp <= 0 || len(line) < sp+6 || !validPerms(line[sp+1:sp+5]) || line[sp+5] != ' ' {
			s.malformed(malformed(s.lineNo, line))
			continue
		}
		perms := line[sp+1 : sp+5]
		// Without stat, most lines end here. The fields before the path hold
		// no '/', so a '/' after a space starts a file's path, and only one
		// with "/dev/" in it can be a device. Other lines (anonymous, [heap],
		// [anon:name]) matter only when executable.
		if s.Stat == nil {
			rest := line[sp+5:]
			if slash := bytes.IndexByte(rest, '/'); slash > 0 && rest[slash-1] == ' ' {
				if !bytes.Contains(rest[slash:], devDir) && !bytes.HasPrefix(rest[slash:], dmabufPrefix) {
					continue
				}
			} else if perms[2] != 'x' {
				continue
			}
		}
		path, devIno, ok := pathField(line[sp+5:])
		if !ok {
			s.malformed(malformed(s.lineNo, line))
			continue
		}
		anon := len(path) == 0 || bytes.HasPrefix(path, anonNamePrefix)
		switch {
		case anon && perms[2] == 'x':
			m, err := ParseMapsLine(line)
			if err != nil {
				s.malformed(fmt.Sprintf("maps line %d: %v", s.lineNo, err))
				continue
			}
			switch {
			case m.End-m.Start < suspectAnonSize:
			case s.anon.Full():
				s.anon.Count(m.End-m.Start, m.Perms[:])
			default:
				mp := newMapping(line, &m)
				mp.Class = snapshot.ClassAnonExec
				s.anon.Keep(mp)
			}
		case len(path) > 0 && path[0] == '/':
			// A library maps as several lines in a row, each the same file
			// as the line before, already found not to be a device.
			if (bytes.Equal(devIno, s.lastFile) && bytes.Equal(path, s.lastPath)) || s.knownNoDevice(devIno, path) {
				s.notDevice(devIno, path)
				continue
			}
			// maps writes a path of any length, where readlink and the BPF
			// path's d_path stop at PATH_MAX. A longer one (a tenant's
			// nested directories) is kept unnamed, as they keep it, and
			// classified by its device number.
			unnamed := len(path) >= PathMax
			if unnamed {
				path = nil
			}
			// A device's line past its first MappingsPerDevice, with
			// permissions already kept, is counted, not kept, nor parsed
			// past its address.
			if s.runs.Counted(devIno, path, perms, line[:sp], 0) {
				continue
			}
			m, err := ParseMapsLine(line)
			if err != nil {
				s.malformed(fmt.Sprintf("maps line %d: %v", s.lineNo, err))
				continue
			}
			if unnamed {
				m.Path, m.Deleted = nil, false
			}
			mp, ok := s.device(line, path, &m)
			if !ok {
				s.notDevice(devIno, path)
				continue
			}
			if unnamed {
				s.res.Errors = append(s.res.Errors, "maps: "+mp.Address+": "+syscall.ENAMETOOLONG.Error())
			}
			s.runs.Keep(devIno, path, perms, mp.Class, mp.GPUMinor)
			if mp.Class == snapshot.ClassNVIDIA {
				s.res.Mappings = append(s.res.Mappings, mp)
			} else {
				s.other = append(s.other, mp)
			}
		}
	}
}

// knownNoDevice reports whether Known says the file of a maps line (its
// "dev inode" text and path) is no device. Every process maps the same
// libraries, and such a line needs no parse. A DMA-buf is decided by its
// name (device).
func (s *MapsScanner) knownNoDevice(devIno, path []byte) bool {
	if s.Stat == nil || s.Known == nil || bytes.HasPrefix(path, dmabufPrefix) {
		return false
	}
	dev, ino, ok := cutField(devIno)
	if !ok {
		return false
	}
	major, minor, ok1 := parseDev(dev)
	inode, ok2 := ParseDec(bytes.TrimRight(ino, " "))
	if !ok1 || !ok2 {
		return false
	}
	kind, ok := s.Known(path, major, minor, inode)
	return ok && !kind.Device
}

// notDevice remembers the file of a line found not to be a device.
func (s *MapsScanner) notDevice(devIno, path []byte) {
	s.lastFile = append(s.lastFile[:0], devIno...)
	s.lastPath = append(s.lastPath[:0], path...)
}

// parseRange parses the address range of a maps line.
func parseRange(addr []byte) (start, end uint64, ok bool) {
	dash := bytes.IndexByte(addr, '-')
	if dash < 0 {
		return 0, 0, false
	}
	start, ok1 := parseHex(addr[:dash])
	end, ok2 := parseHex(addr[dash+1:])
	return start, end, ok1 && ok2 && end >= start
}

var (
	anonNamePrefix = []byte("[anon:")
	devDir         = []byte("/dev/")
	// dmabufPrefix starts the name the kernel gives a DMA-buf ("/dmabuf:NAME"):
	// a buffer a device driver exported (a GPU's, a camera's), which
	// docs/spec.md (Device rule) counts among the other devices though it is
	// no device node.
	dmabufPrefix = []byte("/dmabuf:")
)

// malformed returns the error text of a line that lacks a maps line's shape.
func malformed(lineNo int, line []byte) string {
	_, err := ParseMapsLine(line)
	if err == nil {
		err = fmt.Errorf("%w: too few fields", errMapsLine)
	}
	return fmt.Sprintf("maps line %d: %v", lineNo, err)
}

// pathField finds the path in what follows the permissions of a maps line
// (" offset dev inode   path"), with byte searches only, and the "dev
// inode" text before it, which names the mapped file. The path is empty for
// an anonymous mapping. ok is false when a field is missing.
func pathField(rest []byte) (path, devIno []byte, ok bool) {
	var devStart int
	all := rest
	for f := range 3 {
		if len(rest) < 2 || rest[0] != ' ' {
			return nil, nil, false
		}
		if f == 1 {
			devStart = len(all) - len(rest) + 1
		}
		i := bytes.IndexByte(rest[1:], ' ')
		if i < 0 {
			// A line that ends with the inode is an anonymous mapping without padding.
			return nil, all[devStart:], true
		}
		rest = rest[1+i:]
	}
	return trimLeftSpaces(rest), all[devStart : len(all)-len(rest)], true
}

// device decides whether a parsed file-backed line (path as maps writes it)
// maps a device, and builds its Mapping. Where stat of the mapped file works
// its file type decides, otherwise the path rule of docs/spec.md (Device
// rule) does.
func (s *MapsScanner) device(line, path []byte, m *MapsLine) (snapshot.Mapping, bool) {
	var kind snapshot.FileKind
	known := false
	if s.Stat != nil {
		s.nameBuf = mapFilesName(s.nameBuf[:0], m.Start, m.End)
		kind, known = s.Stat(s.nameBuf, path, m.DevMajor, m.DevMinor, m.Inode)
	}
	if bytes.HasPrefix(m.Path, dmabufPrefix) {
		// Its inode has no file type, so stat says nothing and the name says DMA-buf.
		mp := newMapping(line, m)
		mp.Class = snapshot.ClassOther
		return mp, true
	}
	if known && !kind.Device {
		return snapshot.Mapping{}, false
	}
	if !known && !snapshot.DevicePathRule(m.Path, m.Deleted, m.Perms[3] == 's') {
		return snapshot.Mapping{}, false
	}
	mp := newMapping(line, m)
	if known {
		mp.DeviceNumber, mp.DeviceType = kind.DeviceNumber()
	}
	mp.Class, mp.GPUMinor = s.Classes.Classify(mp.Path, kind, known)
	return mp, true
}

// mapFilesName appends the name of a mapping in /proc/PID/map_files to dst.
// The kernel writes it "%lx-%lx", without the zero padding maps gives an
// address below 0x10000000 (a non-PIE executable at 00400000, a 32-bit
// process, a MAP_FIXED device mapping), and refuses the padded name (ENOENT).
func mapFilesName(dst []byte, start, end uint64) []byte {
	dst = strconv.AppendUint(dst, start, 16)
	dst = append(dst, '-')
	return strconv.AppendUint(dst, end, 16)
}

func newMapping(line []byte, m *MapsLine) snapshot.Mapping {
	rangeText, _, _ := bytes.Cut(line, []byte{' '})
	return snapshot.Mapping{
		Address: string(rangeText),
		Start:   m.Start,
		End:     m.End,
		Size:    m.End - m.Start,
		Perms:   string(m.Perms[:]),
		Offset:  m.Offset,
		Dev:     fmt.Sprintf("%02x:%02x", m.DevMajor, m.DevMinor),
		Inode:   m.Inode,
		Path:    string(m.Path),
		Deleted: m.Deleted,
	}
}

func CutDeletedString(s string) (string, bool) {
	if strings.HasSuffix(s, " (deleted)") {
		return s[:len(s)-len(" (deleted)")], true
	}
	return s, false
}

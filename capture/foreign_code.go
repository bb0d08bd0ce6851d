package capture

import (
	"bytes"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/gpusnap/gpusnap/capture/procfs"
	"github.com/gpusnap/gpusnap/provenance"
	"github.com/gpusnap/gpusnap/snapshot"
)

// Bounds on what is read of a GPU user's code, its whole maps (a tenant can
// push a library past the first lines) and its environment.
const (
	codeMapsLimit    = 8 << 20
	codeFilesLimit   = 4096 // distinct executable files whose packages are asked
	environLimit     = 256 << 10
	loaderValueLimit = 256
)

// loaderVars are the dynamic loader's variables that load code of the
// user's choosing into any dynamically linked program.
var loaderVars = []string{"LD_PRELOAD=", "LD_LIBRARY_PATH=", "LD_AUDIT="}

// kernelCode are the executable mappings the kernel itself gives a process.
var kernelCode = map[string]bool{"[vdso]": true, "[vsyscall]": true, "[uprobes]": true}

// readForeignCode fills each user's ForeignCode on the live procfs with the
// executable mappings of files no package installed (where the host has no
// dpkg database, of files outside snapshot.SystemDirs), of deleted files
// and of no file, the loader's variables in its environment, and whether
// its mount namespace is the capture's (a library's path in another is not
// this host's).
func (cfg *scanConfig) readForeignCode(users []*snapshot.Process, dpkg *provenance.DB, known *binaryCache) {
	if !cfg.live {
		return
	}
	r := procfs.NewReader(cfg.faults, true, false)
	// The capturing thread's namespace, where its paths resolve. The
	// process's (self) is its main thread's, which a thread that took a
	// private namespace of its own (watch's tracefs mount) may be.
	ownMnt, _ := r.ReadlinkAt(cfg.rootfd, cfg.root, "thread-self/ns/mnt")
	files := map[*snapshot.Process][]string{}
	var paths []string
	buf := make([]byte, 64<<10)
	for _, p := range users {
		dir := strconv.Itoa(p.PID)
		if p.LiveThread != 0 {
			dir += "/task/" + strconv.Itoa(p.LiveThread)
		}
		c := p.ForeignCode // readBinaries' record of an exe it refused, else none
		if c == nil {
			c = &snapshot.ForeignCode{}
			p.ForeignCode = c
		}
		mnt, err := r.ReadlinkAt(cfg.rootfd, cfg.root, dir+"/ns/mnt")
		if err != nil {
			c.Unread = append(c.Unread, "ns/mnt: "+errText(err))
		}
		c.OtherMountNamespace = err == nil && mnt != ownMnt
		var text []byte
		text, buf = readBounded(r, cfg, dir, "environ", buf, environLimit, c)
		c.LoaderEnv = loaderEnv(text)
		code := newCodeScan(p.Exe)
		buf = code.read(r, cfg, dir, buf, c)
		if code.filesCut {
			c.Unread = append(c.Unread, "maps: past "+strconv.Itoa(codeFilesLimit)+" executable files: the packages of the rest")
		}
		c.Mapped = append(c.Mapped, code.foreign...)
		switch {
		case c.OtherMountNamespace: // another root's paths
		case dpkg == nil:
			c.Mapped = append(c.Mapped, outsideSystemDirs(code.files)...)
		default:
			files[p] = code.files
			paths = append(paths, code.files...)
		}
	}
	owners, complete := ownersOf(paths, dpkg, known)
	for p, fs := range files {
		for _, f := range fs {
			if owners[f] == "" {
				p.ForeignCode.Mapped = append(p.ForeignCode.Mapped, f+": no package installed it")
			}
		}
		if !complete {
			p.ForeignCode.Unread = append(p.ForeignCode.Unread, "the dpkg database, whole: a library's package is unknown")
		}
	}
	for _, p := range users {
		if c := p.ForeignCode; len(c.Mapped) > snapshot.MaxForeignCode {
			c.Mapped = append(c.Mapped[:snapshot.MaxForeignCode], strconv.Itoa(len(c.Mapped)-snapshot.MaxForeignCode)+" more")
		}
	}
}

// outsideSystemDirs names, on a host with no package database to ask, each
// of files that lies outside the directories only packages install into.
// Only root puts a library there, and a tenant's lies elsewhere.
func outsideSystemDirs(files []string) []string {
	var foreign []string
	for _, f := range files {
		if !snapshot.InSystemDir(f) {
			foreign = append(foreign, f+": no package database, and outside the packaged directories")
		}
	}
	return foreign
}

// readBounded reads a file of the process directory dir up to limit. What
// could not be read whole is said in c.Unread.
func readBounded(r *procfs.Reader, cfg *scanConfig, dir, name string, buf []byte, limit int, c *snapshot.ForeignCode) (text, next []byte) {
	text, cut, err := r.ReadCappedAt(cfg.rootfd, cfg.root, dir+"/"+name, buf, limit, false)
	switch {
	case err != nil:
		c.Unread = append(c.Unread, name+": "+errText(err))
	case cut != nil:
		c.Unread = append(c.Unread, name+": past "+strconv.Itoa(limit>>10)+" KiB")
	}
	return text, text
}

// loaderEnv returns the loader's variables an environment (NUL-separated)
// sets, each value cut at loaderValueLimit bytes.
func loaderEnv(environ []byte) []string {
	var set []string
	for kv := range bytes.SplitSeq(environ, []byte{0}) {
		for _, v := range loaderVars {
			if bytes.HasPrefix(kv, []byte(v)) {
				set = append(set, string(kv[:min(len(kv), len(v)+loaderValueLimit)]))
			}
		}
	}
	return set
}

// codeScan gathers a process's executable mappings from its maps text, fed
// a buffer of whole lines at a time. It keeps those of no file (anonymous,
// or a kernel region other than the vDSO's) or of a deleted file in
// foreign, at most MaxForeignCode and then a count, and the distinct paths
// of the other executable files, its exe aside, in files.
type codeScan struct {
	foreign, files []string
	more           int
	filesCut       bool // past codeFilesLimit files, where the rest's packages are unknown
	seen           map[string]bool
}

func newCodeScan(exe string) *codeScan { return &codeScan{seen: map[string]bool{exe: true}} }

// read streams the maps of dir through buf, a buffer's worth at a time. A
// tenant's maps may run to megabytes, and only its executable lines cost
// more than a scan. What could not be read whole is said in c.Unread.
func (s *codeScan) read(r *procfs.Reader, cfg *scanConfig, dir string, buf []byte, c *snapshot.ForeignCode) []byte {
	fd, err := r.OpenRead(cfg.rootfd, cfg.root, dir+"/maps", false)
	if err != nil {
		c.Unread = append(c.Unread, "maps: "+errText(err))
		return buf
	}
	defer r.Close(fd, false)
	buf, total := buf[:0], 0
	for {
		carried := len(buf)
		var full bool
		buf, full, err = r.ReadFd(fd, buf, cap(buf), false, false)
		total += len(buf) - carried
		if err != nil {
			c.Unread = append(c.Unread, "maps: "+errText(err))
			return buf
		}
		end := bytes.LastIndexByte(buf, '\n') + 1
		if !full {
			end = len(buf) // the end of the file, its last line too
		}
		s.feed(buf[:end])
		buf = buf[:copy(buf, buf[end:])]
		switch {
		case !full:
			s.finish()
			return buf
		case total >= codeMapsLimit || len(buf) == cap(buf):
			// Past the limit, or a line longer than the buffer (a path
			// past PATH_MAX), the rest is not judged.
			c.Unread = append(c.Unread, "maps: past "+strconv.Itoa(codeMapsLimit>>10)+" KiB, or a line longer than "+strconv.Itoa(cap(buf))+" bytes")
			s.finish()
			return buf
		}
	}
}

// feed scans whole lines of maps text, where a line not executable costs a
// byte comparison.
func (s *codeScan) feed(text []byte) {
	for line := range bytes.Lines(text) {
		sp := bytes.IndexByte(line, ' ')
		if sp < 0 || len(line) < sp+4 || line[sp+3] != 'x' {
			continue
		}
		f := strings.Fields(string(line))
		if len(f) < 5 {
			continue
		}
		path := ""
		if len(f) > 5 {
			path = strings.Join(f[5:], " ")
		}
		switch {
		case kernelCode[path]:
		case path == "" || strings.HasPrefix(path, "["):
			s.addForeign(strings.TrimSpace("anonymous " + f[0] + " " + path))
		case strings.HasSuffix(path, " (deleted)") || !strings.HasPrefix(path, "/"):
			s.addForeign(path)
		case s.seen[path]:
		case len(s.files) == codeFilesLimit:
			s.filesCut = true
		default:
			s.seen[path] = true
			s.files = append(s.files, path)
		}
	}
}

func (s *codeScan) addForeign(what string) {
	if len(s.foreign) < snapshot.MaxForeignCode {
		s.foreign = append(s.foreign, what)
		return
	}
	s.more++
}

// finish sorts the files and counts the foreign mappings past the bound.
func (s *codeScan) finish() {
	slices.Sort(s.files)
	if s.more > 0 {
		s.foreign = append(s.foreign, strconv.Itoa(s.more)+" more")
	}
}

// executableMappings is codeScan of a whole maps text.
func executableMappings(text []byte, exe string) (foreign, files []string) {
	s := newCodeScan(exe)
	s.feed(text)
	s.finish()
	return s.foreign, s.files
}

// ownersOf finds the package that owns each of paths, from the binary
// cache where it knows them under the database's stamp, else from the
// database (learnt into the cache where it was read whole). complete is
// false where some path's owner may be unknown.
func ownersOf(paths []string, dpkg *provenance.DB, known *binaryCache) (owners map[string]string, complete bool) {
	owners, missing := known.owners(dpkg.Stamp(), paths)
	if len(missing) == 0 {
		return owners, true
	}
	found, complete := dpkg.Owners(missing)
	maps.Copy(owners, found)
	if complete {
		known.learnOwners(dpkg.Stamp(), missing, found)
	}
	return owners, complete
}

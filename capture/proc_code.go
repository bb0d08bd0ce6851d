package capture

import (
	"bytes"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/gpusnap/gpusnap/provenance"
	"github.com/gpusnap/gpusnap/snapshot"
)

// Bounds on what is read of a GPU user's code: its whole maps (a tenant can
// push a library past the first lines) and its environment.
const (
	codeMapsLimit    = 8 << 20
	environLimit     = 256 << 10
	loaderValueLimit = 256
)

// loaderVars are the dynamic loader's variables that load code of the
// user's choosing into any dynamically linked program.
var loaderVars = []string{"LD_PRELOAD=", "LD_LIBRARY_PATH=", "LD_AUDIT="}

// kernelCode are the executable mappings the kernel itself gives a process.
var kernelCode = map[string]bool{"[vdso]": true, "[vsyscall]": true, "[uprobes]": true}

// readForeignCode fills each user's ForeignCode on the live procfs: the
// executable mappings of files no package installed (dpkg: nil where the
// host has none, and then not judged), of deleted files and of no file, the
// loader's variables in its environment, and whether its mount namespace
// is the capture's (a library's path in another is not this host's).
func (cfg *scanConfig) readForeignCode(users []*snapshot.Process, dpkg *provenance.DB, known *binaryCache) {
	if !cfg.live {
		return
	}
	r := newReader(cfg.faults, true, false)
	ownMnt, _ := r.readlinkAt(cfg.rootfd, cfg.root, "self/ns/mnt")
	files := map[*snapshot.Process][]string{}
	var paths []string
	buf := make([]byte, 64<<10)
	for _, p := range users {
		dir := strconv.Itoa(p.PID)
		if p.LiveThread != 0 {
			dir += "/task/" + strconv.Itoa(p.LiveThread)
		}
		c := &snapshot.ForeignCode{}
		p.ForeignCode = c
		mnt, err := r.readlinkAt(cfg.rootfd, cfg.root, dir+"/ns/mnt")
		if err != nil {
			c.Unread = append(c.Unread, "ns/mnt: "+errText(err))
		}
		c.OtherMountNamespace = err == nil && mnt != ownMnt
		var text []byte
		text, buf = readBounded(r, cfg, dir, "environ", buf, environLimit, c)
		c.LoaderEnv = loaderEnv(text)
		text, buf = readBounded(r, cfg, dir, "maps", buf, codeMapsLimit, c)
		var mapped []string
		mapped, files[p] = executableMappings(text, p.Exe)
		c.Mapped = append(c.Mapped, mapped...)
		if c.OtherMountNamespace || dpkg == nil {
			delete(files, p) // another root's paths, or no database to ask
		}
		paths = append(paths, files[p]...)
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

// readBounded reads a file of the process directory dir up to limit; what
// could not be read whole is said in c.Unread.
func readBounded(r *reader, cfg *scanConfig, dir, name string, buf []byte, limit int, c *snapshot.ForeignCode) (text, next []byte) {
	text, cut, err := r.readCappedAt(cfg.rootfd, cfg.root, dir+"/"+name, buf, limit, false)
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

// executableMappings reads maps text: the executable mappings that are no
// file's (anonymous, or a kernel region other than the vDSO's) or a deleted
// file's, and the distinct paths of the other executable files, exe aside.
func executableMappings(text []byte, exe string) (foreign, files []string) {
	seen := map[string]bool{exe: true}
	for line := range bytes.Lines(text) {
		f := strings.Fields(string(line))
		if len(f) < 5 || len(f[1]) < 3 || f[1][2] != 'x' {
			continue
		}
		path := ""
		if len(f) > 5 {
			path = strings.Join(f[5:], " ")
		}
		switch {
		case kernelCode[path]:
		case path == "" || strings.HasPrefix(path, "["):
			foreign = append(foreign, strings.TrimSpace("anonymous "+f[0]+" "+path))
		case strings.HasSuffix(path, " (deleted)") || !strings.HasPrefix(path, "/"):
			foreign = append(foreign, path)
		case !seen[path]:
			seen[path] = true
			files = append(files, path)
		}
	}
	slices.Sort(files)
	return foreign, files
}

// ownersOf finds the package that owns each of paths, from the binary
// cache where it knows them under the database's stamp, else from the
// database (learnt into the cache where it was read whole); complete is
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

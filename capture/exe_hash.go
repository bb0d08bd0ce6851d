package capture

import (
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/gpusnap/gpusnap/provenance"
	"github.com/gpusnap/gpusnap/snapshot"
)

// DefaultHashLimit is --hash-limit's default. No GPU job's executable is
// larger, and a tenant's 100 GiB sparse file must not cost a capture minutes.
const DefaultHashLimit = 512 << 20

// exeKey names one executable file within a capture, so that the same file,
// not changed since, is hashed once however many processes run it.
type exeKey struct {
	dev, ino           uint64
	size, mtime, ctime int64
}

type exeDigest struct {
	sha256, md5, status, err string
}

// exeHasher hashes executables through /proc/PID/exe, which opens the very
// file the process runs, a deleted binary or a memfd included.
type exeHasher struct {
	limit int64
	cache map[exeKey]exeDigest
	// known holds the digests of earlier captures (Options.BinaryCache).
	known *binaryCache
	buf   []byte
}

// hash hashes the exe of the task directory dir (PID or PID/task/TID) under
// the live proc root rootfd. path is where that exe link points.
func (h *exeHasher) hash(rootfd int, dir, path string) exeDigest {
	fd, err := unix.Openat(rootfd, dir+"/exe", unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return exeDigest{status: snapshot.HashUnreadable, err: "exe: " + errText(err)}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return exeDigest{status: snapshot.HashUnreadable, err: "exe: " + errText(err)}
	}
	key := exeKey{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}
	if d, ok := h.cache[key]; ok {
		return d
	}
	known := binaryKey{Path: path, Dev: st.Dev, Ino: st.Ino, Size: st.Size, Mtime: key.mtime, Ctime: key.ctime}
	d, ok := h.known.digest(known)
	if !ok {
		d = h.read(fd, st)
		h.known.put(known, d)
	}
	h.cache[key] = d
	return d
}

// read hashes the open file fd of stat st, whole or not at all.
func (h *exeHasher) read(fd int, st unix.Stat_t) exeDigest {
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return exeDigest{status: snapshot.HashUnreadable, err: "exe: not a regular file"}
	case st.Size > h.limit:
		return exeDigest{status: snapshot.HashTooLarge, err: fmt.Sprintf("exe: %d bytes, more than the hash limit of %d", st.Size, h.limit)}
	case st.Size == 0:
		return exeDigest{status: snapshot.HashUnreadable, err: "exe: empty"}
	}
	if h.buf == nil {
		h.buf = make([]byte, 1<<20)
	}
	s, m := sha256.New(), md5.New()
	var n int64
	for n <= st.Size {
		k, err := unix.Read(fd, h.buf)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return exeDigest{status: snapshot.HashUnreadable, err: "exe: " + errText(err)}
		}
		if k == 0 {
			break
		}
		s.Write(h.buf[:k])
		m.Write(h.buf[:k])
		n += int64(k)
	}
	if n != st.Size {
		// Truncated or grown while read. A hash of part of a file is no
		// one's hash.
		return exeDigest{status: snapshot.HashUnreadable, err: fmt.Sprintf("exe: read %d bytes of %d", n, st.Size)}
	}
	return exeDigest{sha256: hex.EncodeToString(s.Sum(nil)), md5: hex.EncodeToString(m.Sum(nil)), status: snapshot.HashOK}
}

// readBinaries hashes each user's exe and names the package that owns its
// path, on the live procfs only, since a tree's exe links name another
// machine's files. An exe on a filesystem a server answers (FUSE), or on
// one that could not be told, is not read, and its ForeignCode says so.
// dpkg is nil where the host has no dpkg database. known (nil for none)
// holds what earlier captures found of the same binaries and paths.
func (cfg *scanConfig) readBinaries(users []*snapshot.Process, limit int64, dpkg *provenance.DB, known *binaryCache) {
	if !cfg.live {
		return
	}
	h := &exeHasher{limit: limit, cache: map[exeKey]exeDigest{}, known: known}
	mounts := newExeMounts()
	var paths []string
	md5s := map[*snapshot.Process]string{}
	for _, p := range users {
		if p.Exe == "" {
			continue // a refused or absent exe, with nothing to hash or look up
		}
		dir := strconv.Itoa(p.PID)
		if p.LiveThread != 0 {
			dir += "/task/" + strconv.Itoa(p.LiveThread)
		}
		var d exeDigest
		if why, served := mounts.refusal(cfg.rootfd, cfg.root, dir); why != "" {
			// Not read, as its bytes are a server's word, or of a filesystem unknown.
			d = exeDigest{status: snapshot.HashUnreadable, err: "exe: " + why}
			p.ForeignCode = refusedExe(p.Exe, why, served)
		} else {
			d = h.hash(cfg.rootfd, dir, p.Exe)
		}
		p.ExeSHA256, p.HashStatus, md5s[p] = d.sha256, d.status, d.md5
		if d.err != "" {
			p.Errors = append(p.Errors, d.err)
		}
		paths = append(paths, p.Exe)
	}
	owners, _ := ownersOf(paths, dpkg, known)
	for p, sum := range md5s {
		status, why := dpkg.Status(owners[p.Exe], p.Exe, sum)
		p.Package = &snapshot.Package{Name: owners[p.Exe], Status: status}
		if why != "" && status == provenance.Unknown && dpkg != nil {
			p.Errors = append(p.Errors, "package: "+why)
		}
	}
}

// refusedExe is the ForeignCode record of an exe whose bytes no digest
// vouches for, so that an exe entry never matches its process.
func refusedExe(exe, why string, served bool) *snapshot.ForeignCode {
	if served {
		return &snapshot.ForeignCode{Mapped: []string{exe + ": " + why}}
	}
	return &snapshot.ForeignCode{Unread: []string{"exe: " + why}}
}

package capture

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/gpusnap/gpusnap/internal/safefile"
	"github.com/gpusnap/gpusnap/snapshot"
)

// Bounds of the binary cache. It names the GPU users' binaries, a handful on
// any host, and a tenant that runs thousands of binaries in turn only pushes
// the oldest out.
const (
	binaryCacheBytes   = 1 << 20
	binaryCacheEntries = 1024
)

// binaryKey names one version of one executable file by its path (as
// /proc/PID/exe names it), device, inode, size, mtime and ctime. A binary
// rewritten in place and touched back to its old mtime still has a new
// ctime, which no one can set back.
type binaryKey struct {
	Path  string `json:"path"`
	Dev   uint64 `json:"dev"`
	Ino   uint64 `json:"ino"`
	Size  int64  `json:"size"`
	Mtime int64  `json:"mtime_ns"`
	Ctime int64  `json:"ctime_ns"`
}

// cachedBinary is one hashed binary as the cache file keeps it.
type cachedBinary struct {
	binaryKey
	SHA256 string `json:"sha256"`
	MD5    string `json:"md5"`
}

// binaryFile is the cache file's content.
type binaryFile struct {
	// Dpkg is the dpkg database's stamp (provenance.DB.Stamp) under which
	// Owners were found. Under another stamp they are all looked up again.
	Dpkg string `json:"dpkg"`
	// Owners maps an exe path to the package that owns it, "" for none.
	Owners   map[string]string `json:"owners"`
	Binaries []cachedBinary    `json:"binaries"`
}

// binaryCache is what one capture hands the next about GPU users' binaries
// (Options.BinaryCache), that is each binary's digests by its key, and each
// exe path's dpkg owner. A GPU host runs the same few binaries capture after
// capture, and with the cache a later capture re-reads no unchanged binary
// and no .list file. It is as trusted as the store it sits beside.
type binaryCache struct {
	path    string
	file    binaryFile
	digests map[binaryKey]exeDigest
	used    map[binaryKey]bool
	changed bool
}

// loadBinaryCache reads the cache file at path, where "" is no cache. A
// missing file is an empty cache, and a damaged one is an empty cache and a
// note (it is rewritten whole at the end of the capture).
func loadBinaryCache(path string) (*binaryCache, string) {
	if path == "" {
		return nil, ""
	}
	c := &binaryCache{path: path, digests: map[binaryKey]exeDigest{}, used: map[binaryKey]bool{}}
	data, err := readCacheFile(path, binaryCacheBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return c, ""
	}
	if err == nil {
		var f binaryFile
		if err = json.Unmarshal(data, &f); err == nil {
			err = c.adopt(f)
		}
	}
	if err != nil {
		c.changed = true
		return c, fmt.Sprintf("binary cache: %s: %s (every binary is hashed again)", path, errText(err))
	}
	return c, ""
}

// readCacheFile reads a regular file, never through a symbolic link, of at
// most limit bytes.
func readCacheFile(path string, limit int64) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	st, err := f.Stat()
	switch {
	case err != nil:
		return nil, err
	case !st.Mode().IsRegular():
		return nil, fmt.Errorf("%w (%s)", safefile.ErrNotRegular, safefile.TypeName(st.Mode()))
	case st.Size() > limit:
		return nil, fmt.Errorf("%w: %d bytes, at most %d", safefile.ErrTooLarge, st.Size(), limit)
	}
	return io.ReadAll(io.LimitReader(f, limit))
}

// adopt takes a decoded file's entries, refusing the file whole where one
// is malformed, as a digest of the wrong length is no digest.
func (c *binaryCache) adopt(f binaryFile) error {
	if len(f.Binaries) > binaryCacheEntries || len(f.Owners) > binaryCacheEntries {
		return fmt.Errorf("more than %d entries", binaryCacheEntries)
	}
	for _, b := range f.Binaries {
		if !isHex(b.SHA256, 64) || !isHex(b.MD5, 32) {
			return fmt.Errorf("entry %q: malformed digest", b.Path)
		}
		c.digests[b.binaryKey] = exeDigest{sha256: b.SHA256, md5: b.MD5, status: snapshot.HashOK}
	}
	c.file = f
	return nil
}

func isHex(s string, n int) bool {
	_, err := hex.DecodeString(s)
	return len(s) == n && err == nil
}

// digest is the cached digest of the binary of key, if any.
func (c *binaryCache) digest(key binaryKey) (exeDigest, bool) {
	if c == nil {
		return exeDigest{}, false
	}
	d, ok := c.digests[key]
	if ok {
		c.used[key] = true
	}
	return d, ok
}

// put keeps a binary read whole. What was not (too large, unreadable) is
// read again next time, as the hash limit or the access may have changed.
func (c *binaryCache) put(key binaryKey, d exeDigest) {
	if c == nil || d.status != snapshot.HashOK {
		return
	}
	c.digests[key], c.used[key], c.changed = d, true, true
}

// owners returns the cached owners of paths found under the database stamp,
// and the paths it does not know.
func (c *binaryCache) owners(stamp string, paths []string) (known map[string]string, missing []string) {
	known = map[string]string{}
	if c == nil || stamp == "" || c.file.Dpkg != stamp {
		return known, paths
	}
	for _, p := range paths {
		if owner, ok := c.file.Owners[p]; ok {
			known[p] = owner
		} else {
			missing = append(missing, p)
		}
	}
	return known, missing
}

// learnOwners keeps the owners of paths found under stamp by a scan that
// read every .list file. found holds the owners it found, and every other
// path of paths has none.
func (c *binaryCache) learnOwners(stamp string, paths []string, found map[string]string) {
	if c == nil || stamp == "" || len(paths) == 0 {
		return
	}
	if c.file.Dpkg != stamp || len(c.file.Owners)+len(paths) > binaryCacheEntries {
		c.file.Dpkg, c.file.Owners = stamp, map[string]string{}
	}
	if c.file.Owners == nil {
		c.file.Owners = map[string]string{}
	}
	for _, p := range paths {
		c.file.Owners[p] = found[p]
	}
	c.changed = true
}

// save writes the cache back where it changed, the binaries this capture
// used first, then the others it had, up to the bound. A directory that
// does not exist (a user who has no store yet) is no failure.
func (c *binaryCache) save(ctx context.Context) string {
	if c == nil || !c.changed {
		return ""
	}
	if _, err := os.Stat(filepath.Dir(c.path)); errors.Is(err, fs.ErrNotExist) {
		return ""
	}
	var kept []cachedBinary
	for _, pass := range []bool{true, false} {
		for key, d := range c.digests {
			if c.used[key] == pass && len(kept) < binaryCacheEntries {
				kept = append(kept, cachedBinary{binaryKey: key, SHA256: d.sha256, MD5: d.md5})
			}
		}
	}
	c.file.Binaries = kept
	data, err := json.Marshal(c.file)
	if err == nil {
		err = safefile.Create(ctx, c.path, 0o600, true, func(w io.Writer) error {
			_, err := w.Write(data)
			return err
		})
	}
	if err != nil {
		return "binary cache: " + err.Error()
	}
	return ""
}

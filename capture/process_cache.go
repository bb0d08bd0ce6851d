package capture

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/gpusnap/gpusnap/capture/procfs"
	"github.com/gpusnap/gpusnap/internal/safefile"
)

// processCacheBytes bounds the process cache file. A host has at most
// procfs.PIDMax processes, each a record of a few hundred bytes, and a file
// past this bound is refused rather than read.
const processCacheBytes = 256 << 20

// processCacheMagic opens the file, and another version is a cold cache.
const processCacheMagic = "gpusnap process cache 2\n"

// procKey names one process for its whole life, as a PID is reused only by
// another process, which starts at another time.
type procKey struct {
	pid   int
	start uint64
}

// cachedIdentity is what a process cannot change at all, its pid namespace
// and NSpid, with what proves it the same process that has not exec'd since
// (the exec marks and comm of its stat, and its exe link).
type cachedIdentity struct {
	marks     procfs.ExecMarks
	comm, exe string // stat's comm and the exe link's text, " (deleted)" and all
	nspid     []int
	pidNS     string
}

// processCache is what one /proc capture hands the next. A process whose
// stat marks, comm and exe link are those the last capture saw is not asked
// its pid namespace or NSpid again. The rest is read every time, its command
// line too (see commandLine). It holds for one boot and pid namespace, as
// trusted as the store beside it.
type processCache struct {
	path    string
	boot    string // the host's boot ID
	pidNS   string // the proc root's pid namespace
	entries map[procKey]*cachedIdentity
}

// loadProcessCache reads the cache at path for this boot and pid
// namespace, where "" is none. A missing file, or one of another boot, is
// an empty cache, and a damaged one is an empty cache and a note.
func loadProcessCache(path, boot, pidNS string) (*processCache, string) {
	if path == "" || boot == "" || pidNS == "" {
		return nil, ""
	}
	c := &processCache{path: path, boot: boot, pidNS: pidNS, entries: map[procKey]*cachedIdentity{}}
	data, err := readCacheFile(path, processCacheBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return c, ""
	}
	if err == nil {
		err = c.decode(data)
	}
	if err != nil {
		c.entries = map[procKey]*cachedIdentity{}
		return c, fmt.Sprintf("process cache: %s: %s (every process is read whole)", path, errText(err))
	}
	return c, ""
}

// recall returns what the last capture knew of the process of key, if its
// stat's marks and comm are still those the last capture saw.
func (c *processCache) recall(key procKey, st procfs.Stat) *cachedIdentity {
	if c == nil || !st.Marks.Known() {
		return nil
	}
	e := c.entries[key]
	if e == nil || e.marks != st.Marks || e.comm != st.Comm {
		return nil
	}
	return e
}

// save writes the identities of this capture's processes as the cache,
// whole. A directory that does not exist (no store yet) is no failure.
func (c *processCache) save(ctx context.Context, results []result) string {
	if c == nil {
		return ""
	}
	if _, err := os.Stat(filepath.Dir(c.path)); errors.Is(err, fs.ErrNotExist) {
		return ""
	}
	data := c.encode(results)
	err := safefile.Create(ctx, c.path, 0o600, true, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
	if err != nil {
		return "process cache: " + err.Error()
	}
	return ""
}

// encode lays the file out as the magic, the boot ID and pid namespace,
// then one record a process of PID, start time, marks, NSpid and the texts.
func (c *processCache) encode(results []result) []byte {
	buf := appendString(appendString([]byte(processCacheMagic), c.boot), c.pidNS)
	for i := range results {
		e := results[i].cache
		if e == nil || results[i].vanished || results[i].refused {
			continue
		}
		buf = binary.AppendUvarint(buf, uint64(results[i].p.PID))
		buf = binary.AppendUvarint(buf, results[i].p.StartTime)
		for _, m := range e.marks {
			buf = binary.AppendUvarint(buf, m)
		}
		buf = binary.AppendUvarint(buf, uint64(len(e.nspid)))
		for _, n := range e.nspid {
			buf = binary.AppendUvarint(buf, uint64(n))
		}
		for _, s := range []string{e.comm, e.exe, e.pidNS} {
			buf = appendString(buf, s)
		}
	}
	return buf
}

func appendString(buf []byte, s string) []byte {
	return append(binary.AppendUvarint(buf, uint64(len(s))), s...)
}

// decode reads the file's records. A file of another boot or pid namespace
// is an empty cache, a malformed one an error.
func (c *processCache) decode(data []byte) error {
	d := cacheDecoder{data: data}
	if string(d.bytes(len(processCacheMagic))) != processCacheMagic {
		return errors.New("not a process cache of this version")
	}
	if d.string() != c.boot || d.string() != c.pidNS {
		return d.err // another boot's PIDs, or another namespace's, are other processes
	}
	for d.err == nil && len(d.data) > 0 {
		key := procKey{pid: int(d.uint(procfs.PIDMax - 1)), start: d.uint(1<<64 - 1)}
		e := &cachedIdentity{}
		for i := range e.marks {
			e.marks[i] = d.uint(1<<64 - 1)
		}
		e.nspid = make([]int, d.uint(32)) // the kernel nests at most 32 pid namespaces
		for i := range e.nspid {
			e.nspid[i] = int(d.uint(procfs.PIDMax - 1))
		}
		e.comm, e.exe, e.pidNS = d.string(), d.string(), d.string()
		c.entries[key] = e
	}
	return d.err
}

// cacheDecoder reads a cache file's fields. The first malformed one sets err
// and every later read returns zero.
type cacheDecoder struct {
	data []byte
	err  error
}

func (d *cacheDecoder) fail() {
	if d.err == nil {
		d.err = errors.New("malformed record")
	}
	d.data = nil
}

func (d *cacheDecoder) bytes(n int) []byte {
	if n > len(d.data) {
		d.fail()
		return nil
	}
	b := d.data[:n]
	d.data = d.data[n:]
	return b
}

func (d *cacheDecoder) uint(limit uint64) uint64 {
	v, n := binary.Uvarint(d.data)
	if n <= 0 || v > limit {
		d.fail()
		return 0
	}
	d.data = d.data[n:]
	return v
}

func (d *cacheDecoder) string() string {
	return string(d.bytes(int(d.uint(uint64(len(d.data))))))
}

package reap

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gpusnap/gpusnap/internal/mountinfo"
)

// Memory is a process's memory kept as evidence, the readable regions of
// its maps outside device mappings, one after another in File, each named
// with its place in File in Index.
type Memory struct {
	File   string `json:"file"`
	Index  string `json:"index"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
	// Cut says the regions went on past the limit, where keeping stopped.
	Cut bool `json:"cut,omitempty"`
	// Unread counts the regions of a file that a FUSE server, or a
	// filesystem gpusnap could not tell, holds. They are not read (their
	// server may never answer), and each is named in Index.
	Unread int `json:"unread,omitempty"`
}

func (m Memory) String() string {
	cut := ""
	if m.Cut {
		cut = ", cut at --memory-limit"
	}
	if m.Unread > 0 {
		cut += fmt.Sprintf(", %d regions not read (a FUSE server's file, or a filesystem not told: the index names them)", m.Unread)
	}
	return fmt.Sprintf("kept %d bytes in %s (sha256 %s%s)", m.Bytes, m.File, m.SHA256, cut)
}

// KeepMemory writes t's memory outside device mappings under dir, at most
// limit bytes. The file of /proc/PID/mem is checked, once open, to belong
// to the process judged, since an open mem file stays bound to its
// process. A page of a mapped file not in memory is read from its
// filesystem, and a FUSE server may never answer, so such a region is not
// read (fileSystems).
func KeepMemory(dir string, limit int64, t Target) (Memory, error) {
	proc := "/proc/" + strconv.Itoa(t.PID)
	mem, err := os.Open(proc + "/mem")
	if err != nil {
		return Memory{}, fmt.Errorf("memory of %s: %w", t.Key(), err)
	}
	defer mem.Close()
	if st, err := readStat(t.PID); err != nil || st.start != t.StartTime {
		return Memory{}, fmt.Errorf("memory of %s: the PID is another process now", t.Key())
	}
	maps, err := os.ReadFile(proc + "/maps")
	if err != nil {
		return Memory{}, fmt.Errorf("memory of %s: %w", t.Key(), err)
	}
	m := Memory{File: filepath.Join(dir, t.Key()+".mem"), Index: filepath.Join(dir, t.Key()+".regions")}
	out, err := os.OpenFile(m.File, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return Memory{}, err
	}
	index := &strings.Builder{}
	h := sha256.New()
	w := bufio.NewWriter(io.MultiWriter(out, h))
	fs := fileSystemsOf(t.PID)
	for _, r := range keptRegions(string(maps)) {
		if why := fs.refusal(r); why != "" {
			fmt.Fprintf(index, "%d 0 %s (not read: %s)\n", m.Bytes, r.line, why)
			m.Unread++
			continue
		}
		n := int64(r.end - r.start)
		if m.Bytes+n > limit {
			n, m.Cut = limit-m.Bytes, true
		}
		// A region the kernel will not read (a guard page, an I/O range)
		// is named in the index with what was read of it.
		got, _ := io.Copy(w, io.NewSectionReader(mem, int64(r.start), n))
		fmt.Fprintf(index, "%d %d %s\n", m.Bytes, got, r.line)
		m.Bytes += got
		if m.Cut {
			break
		}
	}
	err = w.Flush()
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.WriteFile(m.Index, []byte(index.String()), 0o600)
	}
	if err != nil {
		return Memory{}, err
	}
	m.SHA256 = hex.EncodeToString(h.Sum(nil))
	return m, nil
}

// region is one line of maps that KeepMemory reads.
type region struct {
	start, end uint64
	dev        string // the maps dev field, MAJ:MIN in decimal as mountinfo has it
	inode      uint64
	line       string
}

// keptRegions are the readable regions of a maps text outside device
// mappings. A GPU's memory is the device's to hold, not the process's, and
// reading it can hang or fault. The kernel's vvar and vsyscall pages read
// as nothing.
func keptRegions(maps string) []region {
	var out []region
	for _, line := range strings.Split(maps, "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || !strings.HasPrefix(f[1], "r") {
			continue
		}
		name := ""
		if len(f) >= 6 {
			name = strings.Join(f[5:], " ")
		}
		if isDeviceName(name) || strings.HasPrefix(name, "[vvar") || name == "[vsyscall]" {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		major, minor, ok2 := strings.Cut(f[3], ":")
		devMajor, err3 := strconv.ParseUint(major, 16, 32)
		devMinor, err4 := strconv.ParseUint(minor, 16, 32)
		inode, err5 := strconv.ParseUint(f[4], 10, 64)
		if !ok || !ok2 || errors.Join(err1, err2, err3, err4, err5) != nil || end <= start {
			continue
		}
		dev := strconv.FormatUint(devMajor, 10) + ":" + strconv.FormatUint(devMinor, 10)
		out = append(out, region{start: start, end: end, dev: dev, inode: inode, line: line})
	}
	return out
}

// mountinfoLimit bounds one mount table read. A tenant with a mount
// namespace of its own makes its table as long as it likes, and a file
// whose filesystem lies past it is of a filesystem not told.
const mountinfoLimit = 4 << 20

// fileSystems are filesystem types by device (MAJ:MIN), told without asking
// any filesystem. They come from the target's mount table and gpusnap's
// own, and from the kernel's shared memory (memfd, SysV, a shared
// /dev/zero, mounted nowhere), whose device a memfd of gpusnap's own shows.
type fileSystems map[string]string

func fileSystemsOf(pid int) fileSystems {
	fs := fileSystems{}
	for _, name := range []string{"/proc/self/mountinfo", "/proc/" + strconv.Itoa(pid) + "/mountinfo"} {
		f, err := os.Open(name)
		if err != nil {
			continue // its files are then of filesystems not told, and not read
		}
		sc := bufio.NewScanner(io.LimitReader(f, mountinfoLimit))
		sc.Buffer(make([]byte, 64<<10), 64<<10)
		for sc.Scan() {
			if m, ok := mountinfo.ParseLine(sc.Text()); ok {
				fs[m.Dev] = m.FSType
			}
		}
		f.Close()
	}
	if fd, err := unix.MemfdCreate("gpusnap-shmem", unix.MFD_CLOEXEC); err == nil {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil {
			fs[strconv.FormatUint(uint64(unix.Major(st.Dev)), 10)+":"+strconv.FormatUint(uint64(unix.Minor(st.Dev)), 10)] = "shmem"
		}
		unix.Close(fd)
	}
	return fs
}

// refusal says why region r is not read, or "" where it is, as anonymous
// memory or a file of a filesystem the kernel serves is. A FUSE server's
// file, or one of a filesystem no table names (a FUSE mount detached since
// it was mapped), is not.
func (fs fileSystems) refusal(r region) string {
	if r.dev == "0:0" && r.inode == 0 {
		return ""
	}
	t, ok := fs[r.dev]
	switch {
	case !ok:
		return "its filesystem (device " + r.dev + ") is in no mount table gpusnap read, and may be a FUSE server's"
	case mountinfo.Served(t):
		return "on a " + t + " filesystem, whose server may never answer a read"
	}
	return ""
}

// isDeviceName says whether a maps path names a device node, by the device
// rule's path test. That takes the /dev tree but its shared memory and the
// kernel's name for shared anonymous memory, or a node in a directory named
// dev (a container's /dev seen from the host).
func isDeviceName(name string) bool {
	if filepath.Base(filepath.Dir(name)) == "dev" && !strings.HasPrefix(name, "/dev/") {
		return true
	}
	if !strings.HasPrefix(name, "/dev/") || name == "/dev/zero (deleted)" {
		return false
	}
	for _, keep := range []string{"/dev/shm/", "/dev/mqueue/", "/dev/hugepages/"} {
		if strings.HasPrefix(name, keep) {
			return false
		}
	}
	return true
}

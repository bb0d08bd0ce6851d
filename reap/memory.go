package reap

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Memory is a process's memory kept as evidence: the readable regions of
// its maps outside device mappings, one after another in File, each named
// with its place in File in Index.
type Memory struct {
	File   string `json:"file"`
	Index  string `json:"index"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
	// Cut says the regions went on past the limit, where keeping stopped.
	Cut bool `json:"cut,omitempty"`
}

func (m Memory) String() string {
	cut := ""
	if m.Cut {
		cut = ", cut at --memory-limit"
	}
	return fmt.Sprintf("kept %d bytes in %s (sha256 %s%s)", m.Bytes, m.File, m.SHA256, cut)
}

// KeepMemory writes t's memory outside device mappings under dir, at most
// limit bytes. The file of /proc/PID/mem is checked, once open, to belong
// to the process judged: an open mem file stays bound to its process.
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
	for _, r := range keptRegions(string(maps)) {
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
	line       string
}

// keptRegions are the readable regions of a maps text outside device
// mappings: a GPU's memory is the device's to hold, not the process's, and
// reading it can hang or fault; the kernel's vvar and vsyscall pages read
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
		if !ok || err1 != nil || err2 != nil || end <= start {
			continue
		}
		out = append(out, region{start: start, end: end, line: line})
	}
	return out
}

// isDeviceName says whether a maps path names a device node, by the device
// rule's path test: the /dev tree but its shared memory and the kernel's
// name for shared anonymous memory, or a node in a directory named dev (a
// container's /dev seen from the host).
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

package capture

import (
	"bytes"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/gpusnap/gpusnap/capture/procfs"
	"github.com/gpusnap/gpusnap/internal/mountinfo"
)

// mountinfoLimit bounds one mount namespace's mountinfo. A tenant with a
// namespace of its own can make it long, and an exe whose mount lies past
// it is of a filesystem unknown.
const mountinfoLimit = 4 << 20

// exeMounts tells the filesystem a process's exe lies on without asking
// that filesystem. statx of the exe link asking no attribute gives the
// mount id from the kernel alone (a FUSE server is not asked), found in the
// process's mountinfo, read once per mount namespace.
type exeMounts struct {
	r    *procfs.Reader
	byNS map[string]map[uint64]string // mount namespace, then mount id, to filesystem type
	buf  []byte
}

func newExeMounts() *exeMounts {
	return &exeMounts{r: procfs.NewReader(nil, true, false), byNS: map[string]map[uint64]string{}, buf: make([]byte, 64<<10)}
}

// refusal says why the exe of the task directory dir is not hashed nor
// vouched for by its path, a served filesystem (served true) or one that
// could not be told. It is "" for a file the kernel serves.
func (m *exeMounts) refusal(rootfd int, root, dir string) (why string, served bool) {
	var stx unix.Statx_t
	if err := unix.Statx(rootfd, dir+"/exe", unix.AT_STATX_DONT_SYNC, 0, &stx); err != nil {
		return "its mount: " + errText(err), false
	}
	ns, err := m.r.ReadlinkAt(rootfd, root, dir+"/ns/mnt")
	if err != nil {
		return "its mount namespace: " + errText(err), false
	}
	mounts, ok := m.byNS[ns]
	if !ok {
		var text []byte
		text, _, err = m.r.ReadCappedAt(rootfd, root, dir+"/mountinfo", m.buf, mountinfoLimit, false)
		if err != nil {
			return "mountinfo: " + errText(err), false
		}
		m.buf = text
		mounts = parseMountTypes(text)
		m.byNS[ns] = mounts
	}
	fstype, ok := mounts[stx.Mnt_id]
	switch {
	case !ok:
		return "its mount " + strconv.FormatUint(stx.Mnt_id, 10) + " is in no mount table of the process (detached, or past " +
			strconv.Itoa(mountinfoLimit>>20) + " MiB): its filesystem is unknown", false
	case mountinfo.Served(fstype):
		return "on a " + fstype + " filesystem, whose server answers what the file holds", true
	}
	return "", false
}

// parseMountTypes reads mountinfo text into each mount's filesystem type,
// by mount id.
func parseMountTypes(text []byte) map[uint64]string {
	types := map[uint64]string{}
	for line := range bytes.Lines(text) {
		if m, ok := mountinfo.ParseLine(string(line)); ok {
			types[m.ID] = m.FSType
		}
	}
	return types
}

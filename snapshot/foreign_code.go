package snapshot

import "strings"

// ForeignCode is what the capture read, for a process that uses a GPU on the
// live procfs, of code it runs beside its exe. An allowed binary vouches for
// its own file, not for a library a tenant loads into it.
type ForeignCode struct {
	// Mapped names each executable mapping of a file no package installed,
	// of a deleted file, or of no file at all, as in `/tmp/x.so: no package
	// installed it`, "/x.so (deleted)" or "anonymous 7f00-7f40". It names
	// the exe too where a FUSE server answers its reads. A host with no dpkg
	// database names each file outside SystemDirs. At most MaxForeignCode
	// are kept.
	Mapped []string `json:"mapped,omitempty"`
	// LoaderEnv are the dynamic loader's variables the process's environment
	// sets (LD_PRELOAD=..., LD_LIBRARY_PATH=...), each value cut at 256 bytes.
	LoaderEnv []string `json:"loader_env,omitempty"`
	// OtherMountNamespace says the process's mount namespace is not the
	// capture's, so its paths are not this host's.
	OtherMountNamespace bool `json:"other_mount_namespace,omitempty"`
	// Unread names what could not be read whole (`environ: permission
	// denied`, `maps: past 8 MiB`).
	Unread []string `json:"unread,omitempty"`
}

// MaxForeignCode bounds ForeignCode.Mapped, since a tenant can map thousands.
const MaxForeignCode = 16

// RunsForeignCode lists why p may run code its exe does not vouch for,
// that is what ForeignCode names and what could not be read. It is empty
// where the capture found nothing, and where it did not look (no
// ForeignCode in an older snapshot, a --proc-root tree, a process that
// uses no GPU).
func (p *Process) RunsForeignCode() []string {
	c := p.ForeignCode
	if c == nil {
		return nil
	}
	var why []string
	for _, m := range c.Mapped {
		why = append(why, "maps "+m)
	}
	for _, e := range c.LoaderEnv {
		why = append(why, "its environment sets "+e)
	}
	for _, u := range c.Unread {
		why = append(why, "not read: "+u)
	}
	return why
}

// SystemDirs are the directories only packages install executables into,
// which only root can write. dpkg's checksums vouch for them, and by them a
// host without a package database still tells a library of its own from
// one a tenant brought.
var SystemDirs = []string{"/usr/bin/", "/usr/sbin/", "/bin/", "/sbin/", "/usr/lib/", "/lib/", "/usr/lib64/", "/lib64/", "/usr/libexec/"}

// InSystemDir reports whether path lies in one of SystemDirs.
func InSystemDir(path string) bool {
	for _, d := range SystemDirs {
		if strings.HasPrefix(path, d) {
			return true
		}
	}
	return false
}

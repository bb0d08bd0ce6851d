package snapshot

import (
	"strings"
)

// SelfNamedCgroup reports whether a cgroup of p lies below a systemd user
// manager (user@UID.service). That subtree is delegated to its user, who
// names the cgroups in it, so a container, pod or job id read from it is
// the user's own word and vouches for nothing.
func (p *Process) SelfNamedCgroup() bool {
	for _, line := range p.Cgroups {
		_, rest, _ := strings.Cut(line, ":")
		_, path, _ := strings.Cut(rest, ":")
		for e := range strings.SplitSeq(path, "/") {
			if strings.HasPrefix(e, "user@") && strings.HasSuffix(e, ".service") {
				return true
			}
		}
	}
	return false
}

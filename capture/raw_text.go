package capture

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/gpusnap/gpusnap/snapshot"
)

// newRaw keeps the raw text of a process, each file cut to TextLimit.
// cmdline comes cut already (cmdCut names the whole of it), and so does maps
// where mapsCut is set.
func newRaw(maps []byte, mapsCut *snapshot.Cut, status []byte, cmdline string, cmdCut *snapshot.Cut, cgroup string) *snapshot.Raw {
	raw := &snapshot.Raw{Cmdline: cmdline}
	add := func(name string, c *snapshot.Cut) {
		if c == nil {
			return
		}
		if raw.Cuts == nil {
			raw.Cuts = map[string]snapshot.Cut{}
		}
		raw.Cuts[name] = *c
	}
	add("cmdline", cmdCut)
	var c *snapshot.Cut
	raw.Maps, c = cutText(maps)
	if mapsCut != nil {
		c = mapsCut
	}
	add("maps", c)
	raw.Status, c = cutText(status)
	add("status", c)
	raw.Cgroup, c = cutText([]byte(cgroup))
	add("cgroup", c)
	return raw
}

// cutText keeps the first TextLimit bytes of text, and names a longer one.
func cutText(text []byte) (string, *snapshot.Cut) {
	if len(text) <= snapshot.TextLimit {
		return string(text), nil
	}
	sum := sha256.Sum256(text)
	return string(text[:snapshot.TextLimit]), &snapshot.Cut{Length: int64(len(text)), SHA256: hex.EncodeToString(sum[:])}
}

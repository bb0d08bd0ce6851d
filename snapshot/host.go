package snapshot

import (
	"strings"
	"time"

	"github.com/prometheus/procfs"
)

// readHost fills the host facts from the proc root: btime from <root>/stat
// (procfs parses it: read once, nothing to gain from our own), hostname,
// kernel release and boot id from <root>/sys/kernel. A fixture root without
// them gets each recorded as unreadable, never the facts of the machine
// running the tests.
func readHost(r *reader, root string, h *Host) (errs []string) {
	fs, err := procfs.NewFS(root)
	if err == nil {
		var st procfs.Stat
		if st, err = fs.Stat(); err == nil {
			h.BootTime = time.Unix(int64(st.BootTime), 0).UTC()
		}
	}
	if err != nil {
		errs = append(errs, "boot time: "+err.Error())
	}
	for _, f := range []struct {
		name, path string
		dst        *string
	}{
		{"hostname", "sys/kernel/hostname", &h.Hostname},
		{"kernel release", "sys/kernel/osrelease", &h.KernelRelease},
		{"boot id", "sys/kernel/random/boot_id", &h.BootID},
	} {
		data, err := r.readFile(root+"/"+f.path, nil)
		if err != nil {
			errs = append(errs, f.name+": "+root+"/"+f.path+": "+errText(err))
			continue
		}
		*f.dst = strings.TrimSpace(string(data))
	}
	return errs
}

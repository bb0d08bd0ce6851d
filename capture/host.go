package capture

import (
	"strings"
	"time"

	"github.com/gpusnap/gpusnap/capture/procfs"
	"github.com/gpusnap/gpusnap/snapshot"
)

// readHost fills the host facts from the proc root open as rootfd, btime from
// <root>/stat, and hostname, kernel release and boot id from
// <root>/sys/kernel. A fixture root without them records each as unreadable,
// never the test machine's facts. The capture's own reader reads them, only
// regular files beneath a tree.
func readHost(r *procfs.Reader, rootfd int, root string, h *snapshot.Host) (errs []string) {
	if data, err := r.ReadFileAt(rootfd, root, "stat", nil); err != nil {
		errs = append(errs, "boot time: "+root+"/stat: "+errText(err))
	} else if btime, err := procfs.ParseBtime(data); err != nil {
		errs = append(errs, "boot time: "+root+"/stat: "+err.Error())
	} else {
		h.BootTime = time.Unix(btime, 0).UTC()
	}
	for _, f := range []struct {
		name, path string
		dst        *string
	}{
		{"hostname", "sys/kernel/hostname", &h.Hostname},
		{"kernel release", "sys/kernel/osrelease", &h.KernelRelease},
		{"boot id", "sys/kernel/random/boot_id", &h.BootID},
	} {
		data, err := r.ReadFileAt(rootfd, root, f.path, nil)
		if err != nil {
			errs = append(errs, f.name+": "+root+"/"+f.path+": "+errText(err))
			continue
		}
		*f.dst = strings.TrimSpace(string(data))
	}
	return errs
}

package capture

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/gpusnap/gpusnap/capture/procfs"
	"golang.org/x/sys/unix"
)

// gpuNodes are the minor numbers of the GPUs the host whose /proc is root
// shows, in each <root>/driver/nvidia/gpus/*/information's `Device Minor:` line,
// and, on the live procfs, each /dev/nvidiaN character device. A check asked
// about a GPU that neither NVML nor these show has not seen it.
func gpuNodes(r *procfs.Reader, rootfd int, root string, live bool) []int {
	var out []int
	add := func(n int) {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	dirs, _ := os.ReadDir(filepath.Join(root, "driver", "nvidia", "gpus"))
	for _, d := range dirs {
		data, err := r.ReadFileAt(rootfd, root, "driver/nvidia/gpus/"+d.Name()+"/information", nil)
		if err != nil {
			continue
		}
		if n, ok := procfs.DeviceMinor(data); ok {
			add(n)
		}
	}
	if live {
		nodes, _ := filepath.Glob("/dev/nvidia[0-9]*")
		for _, p := range nodes {
			var st unix.Stat_t
			n, err := strconv.Atoi(strings.TrimPrefix(p, "/dev/nvidia"))
			if err == nil && unix.Stat(p, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFCHR {
				add(n)
			}
		}
	}
	slices.Sort(out)
	return out
}

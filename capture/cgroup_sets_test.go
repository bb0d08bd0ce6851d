package capture

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gpusnap/gpusnap/snapshot"
)

// TestCgroupOfParsesOncePerText: processes of one cgroup set share its
// parse, each gets lines of its own (makeValidUTF8 edits them in place), and
// a tenant's cgroup per process stops being kept at maxCgroupSets.
func TestCgroupOfParsesOncePerText(t *testing.T) {
	w := &worker{scanConfig: &scanConfig{}, cgroups: map[string]*cgroupSet{}}
	text := []byte("0::/system.slice/docker-" + strings.Repeat("ab", 32) + ".scope\n")
	a, b := w.cgroupOf(text), w.cgroupOf(slices.Clone(text))
	if a != b || a.a.ContainerID != strings.Repeat("ab", 32) || a.a.Runtime != "docker" {
		t.Fatalf("the same text parsed twice, or wrongly: %+v %+v", a, b)
	}
	var p, q snapshot.Process
	setCgroups(&p, a)
	setCgroups(&q, b)
	p.Cgroups[0] = "changed"
	if q.Cgroups[0] == "changed" || a.lines[0] == "changed" {
		t.Error("two processes share one slice of cgroup lines")
	}
	if c := w.cgroupOf([]byte("0::/user.slice\n")); c == a || c.a.ContainerID != "" {
		t.Errorf("another text got %+v", c)
	}
	for i := range maxCgroupSets + 10 {
		w.cgroupOf([]byte("0::/t/" + strconv.Itoa(i) + "\n"))
	}
	if len(w.cgroups) != maxCgroupSets {
		t.Errorf("%d texts kept, want at most %d", len(w.cgroups), maxCgroupSets)
	}
}

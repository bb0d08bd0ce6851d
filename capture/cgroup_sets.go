package capture

import (
	"slices"

	"github.com/gpusnap/gpusnap/capture/procfs"
	"github.com/gpusnap/gpusnap/snapshot"
)

// maxCgroupSets bounds the cgroup texts one worker keeps parsed, since a
// tenant can put each of its processes in a cgroup of its own.
const maxCgroupSets = 4096

// cgroupOf returns the cgroup text data parsed, once per distinct text.
// Most of a host's processes share a few cgroup sets (a service's, a
// session's, a job's), and parsing each again cost more than reading it.
// Past maxCgroupSets texts, a new one is parsed and not kept.
func (w *worker) cgroupOf(data []byte) *cgroupSet {
	if set, ok := w.cgroups[string(data)]; ok {
		return set
	}
	set := &cgroupSet{text: string(data)}
	set.parse(w.live)
	if len(w.cgroups) < maxCgroupSets {
		w.cgroups[set.text] = set
	}
	return set
}

// parse parses the set's text and, on the live procfs, reads the
// ownership of the cgroup directories that carry its owner ids, once per
// set, as the set is.
func (set *cgroupSet) parse(live bool) {
	set.lines, set.a = procfs.ParseCgroup(set.text)
	if live {
		set.owners = readOwnerCgroups(set.a)
	}
}

// setCgroups records the cgroup set of process p and what it reveals.
func setCgroups(p *snapshot.Process, set *cgroupSet) {
	p.Cgroups = slices.Clone(set.lines) // each process's own, as makeValidUTF8 edits in place
	a := set.a
	p.ContainerID, p.ContainerRuntime, p.PodUID, p.SlurmJobID, p.SystemdUnit =
		a.ContainerID, a.Runtime, a.PodUID, a.SlurmJobID, a.SystemdUnit
	p.OwnerCgroups = slices.Clone(set.owners)
}

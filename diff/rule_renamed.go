package diff

import "fmt"

// KindRenamedDeviceNode is a device of an NVIDIA major used under a path that does not say so.
const KindRenamedDeviceNode = "renamed_device_node"

var _ = register(&Rule{
	Kind: KindRenamedDeviceNode, Title: "Renamed NVIDIA device node",
	Severities: []Severity{High},
	GPUUse:     true, Inheritable: true,
	compare: []func(*comparison) []Finding{renamedDeviceNodes},
	Order:   40,
})

// renamedDeviceNodes reports a process that maps or holds, and did not at
// FROM, a device whose number is an NVIDIA major but whose path's last
// element does not start with "nvidia". That is a GPU reached through a node
// made to escape `ls /dev/nvidia*`, `fuser /dev/nvidia*` and grep.
func renamedDeviceNodes(c *comparison) []Finding {
	var out []Finding
	for _, ch := range c.deviceUsers {
		for _, u := range ch.uses {
			if !renamed(u.class, u.devno, u.device) {
				continue
			}
			if prior := ch.prior[u.key()]; prior != nil {
				continue
			}
			evidence := append(mappingEvidence(u.mappings), holderEvidence(u.holders)...)
			out = append(out, c.deviceFinding(ch, u, KindRenamedDeviceNode, High,
				fmt.Sprintf("uses NVIDIA device %s %s under a name that hides it", u.devType, u.devno),
				evidence))
		}
	}
	return out
}

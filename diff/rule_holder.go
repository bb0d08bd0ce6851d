package diff

import "fmt"

// KindLeftoverDeviceHolder: a process holds an NVIDIA device open that it did not hold at FROM.
const KindLeftoverDeviceHolder = "leftover_device_holder"

var ruleLeftoverHolder = &Rule{
	Kind: KindLeftoverDeviceHolder, Title: "Leftover NVIDIA device holder",
	Severities: []Severity{Medium, High},
	GPUUse:     true,
	compare:    []func(*comparison) []Finding{leftoverHolders},
}

// leftoverHolders reports a process that at TO holds an NVIDIA device open
// that it did not hold at FROM. High when a descriptor was opened for
// writing.
func leftoverHolders(c *comparison) []Finding {
	var out []Finding
	for _, ch := range c.deviceUsers {
		if c.sparedMPSServer(ch.proc) {
			continue
		}
		for _, u := range ch.uses {
			if len(u.holders) == 0 || !u.nvidia() {
				continue
			}
			if prior := ch.prior[u.key()]; prior != nil && len(prior.holders) > 0 {
				continue
			}
			sev, how := Medium, "read-only"
			if u.writableHolder() {
				sev, how = High, "for writing"
			}
			out = append(out, c.deviceFinding(ch, u, KindLeftoverDeviceHolder, sev,
				fmt.Sprintf("holds %s open %s (%s)", u.device, how, count(len(u.holders), "descriptor")),
				holderEvidence(u.holders)))
		}
	}
	return out
}

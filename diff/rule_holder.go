package diff

import "fmt"

// KindLeftoverDeviceHolder means a process holds an NVIDIA device open that it did not hold at FROM.
const KindLeftoverDeviceHolder = "leftover_device_holder"

var _ = register(&Rule{
	Kind: KindLeftoverDeviceHolder, Title: "Leftover NVIDIA device holder",
	Severities: []Severity{Low, Medium, High},
	GPUUse:     true, Inheritable: true,
	compare: []func(*comparison) []Finding{leftoverHolders},
	Order:   20,
})

// leftoverHolders reports a process that at TO holds an NVIDIA device open,
// or an accelerator node, that it did not hold at FROM. High when a
// descriptor was opened for writing, low for a render or accel node it did
// no work on (holding one is not GPU work).
func leftoverHolders(c *comparison) []Finding {
	var out []Finding
	for _, ch := range c.deviceUsers {
		if c.sparedMPSServer(ch.proc) {
			continue
		}
		for _, u := range ch.uses {
			if len(u.holders) == 0 || !u.gpuWork() && !u.idleAccelHolder() {
				continue
			}
			if prior := ch.prior[u.key()]; prior != nil && len(prior.holders) > 0 {
				continue
			}
			sev, how := Medium, "read-only"
			if u.writableHolder() {
				sev, how = High, "for writing"
			}
			if !u.gpuWork() {
				sev, how = Low, how+", with no device memory or engine time"
			}
			out = append(out, c.deviceFinding(ch, u, KindLeftoverDeviceHolder, sev,
				fmt.Sprintf("holds %s open %s (%s)", u.device, how, count(len(u.holders), "descriptor")),
				append(holderEvidence(u.holders), c.accelEvidence(ch.proc, u)...)))
		}
	}
	return out
}

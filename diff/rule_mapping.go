package diff

import "fmt"

// KindLeftoverDeviceMapping means a process maps an NVIDIA device it did not map at FROM.
const KindLeftoverDeviceMapping = "leftover_device_mapping"

var _ = register(&Rule{
	Kind: KindLeftoverDeviceMapping, Title: "Leftover NVIDIA device mapping",
	Severities: []Severity{Medium, High},
	GPUUse:     true, Inheritable: true,
	compare: []func(*comparison) []Finding{leftoverMappings},
	Order:   10,
})

// KindOtherDeviceMapping means a process maps a non-NVIDIA device it did not map at FROM.
const KindOtherDeviceMapping = "other_device_mapping"

var _ = register(&Rule{
	Kind: KindOtherDeviceMapping, Title: "New mapping of another device",
	Severities: []Severity{Low},
	compare:    []func(*comparison) []Finding{otherDeviceMappings},
	Order:      30,
})

// leftoverMappings reports a process that at TO maps an NVIDIA device, or an
// accelerator node it works on, that it did not map at FROM (a new process,
// or one that gained it). High when writable.
func leftoverMappings(c *comparison) []Finding {
	var out []Finding
	for _, ch := range c.deviceUsers {
		if c.sparedMPSServer(ch.proc) {
			continue
		}
		for _, u := range ch.gainedMappings() {
			if !u.gpuWork() {
				continue
			}
			sev, how := Medium, "read-only"
			if u.writableMapping() {
				sev, how = High, "writable"
			}
			out = append(out, c.deviceFinding(ch, u, KindLeftoverDeviceMapping, sev,
				fmt.Sprintf("maps %s %s (%s)", u.device, how, count(len(u.mappings), "mapping")),
				append(mappingEvidence(u.mappings), c.accelEvidence(ch.proc, u)...)))
		}
	}
	return out
}

// otherDeviceMappings reports a process that at TO maps a non-NVIDIA device
// (DRM, loop, /dev/mem, DMA-buf ...) that it did not map at FROM, and did no
// accelerator work on. It is low, worth a look, not a GPU leftover by itself.
func otherDeviceMappings(c *comparison) []Finding {
	var out []Finding
	for _, ch := range c.deviceUsers {
		for _, u := range ch.gainedMappings() {
			if u.gpuWork() {
				continue
			}
			how := "read-only"
			if u.writableMapping() {
				how = "writable"
			}
			out = append(out, c.deviceFinding(ch, u, KindOtherDeviceMapping, Low,
				fmt.Sprintf("maps %s %s (%s)", u.device, how, count(len(u.mappings), "mapping")),
				mappingEvidence(u.mappings)))
		}
	}
	return out
}

// gainedMappings are the devices the process maps at TO and did not map at FROM.
func (ch *processChange) gainedMappings() []*deviceUse {
	var out []*deviceUse
	for _, u := range ch.uses {
		if len(u.mappings) == 0 {
			continue
		}
		if prior := ch.prior[u.key()]; prior != nil && len(prior.mappings) > 0 {
			continue
		}
		out = append(out, u)
	}
	return out
}

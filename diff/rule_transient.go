package diff

import "slices"

// transientGPUProcesses: a process that used a GPU between FROM and TO and
// is gone at TO: the worker that ran for 40 ms, the miner that left before
// the epilog. Two snapshots are two instants; what ran between them is known
// from the driver's own records: NVML's accounting records at TO (see
// accountingTransients), where accounting is on; and from the kernel, as
// gpusnap watch recorded it in the event log (see eventTransients). A
// process both name is one finding: the log's events join the accounting
// finding's evidence, and raise it to high where they show a writable
// mapping or masquerade.
func transientGPUProcesses(c *comparison) []Finding {
	out := c.accountingTransients()
	byKey := make(map[string][]int, len(out)) // a process may have run on several GPUs
	for i, f := range out {
		if f.Process != nil {
			byKey[f.Process.Key()] = append(byKey[f.Process.Key()], i)
		}
	}
	for _, f := range c.eventTransients() {
		// Its accounting finding of the same GPU; a device that names no
		// GPU (nvidiactl, nvidia-uvm) joins the process's first.
		at := slices.IndexFunc(byKey[f.Process.Key()], func(i int) bool { return f.GPUUUID == "" || out[i].GPUUUID == f.GPUUUID })
		if at < 0 {
			out = append(out, f)
			continue
		}
		i := byKey[f.Process.Key()][at]
		out[i].Evidence = append(out[i].Evidence, f.Evidence...)
		out[i].Severity = max(out[i].Severity, f.Severity)
		if out[i].Device == "" {
			out[i].Device = f.Device
		}
	}
	return out
}

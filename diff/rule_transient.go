package diff

import "slices"

// KindTransientGPUProcess means a process used a GPU in the window and is gone at TO.
const KindTransientGPUProcess = "transient_gpu_process"

var _ = register(&Rule{
	Kind: KindTransientGPUProcess, Title: "Transient GPU process",
	Severities: []Severity{Medium, High},
	ByPID:      true,
	compare:    []func(*comparison) []Finding{transientGPUProcesses},
	check:      (*comparison).lingeringUsers,
	Order:      100,
})

// transientGPUProcesses reports a process that used a GPU between FROM and TO
// and is gone at TO, like a 40 ms worker. Two snapshots miss it, so NVML's
// accounting records (accountingTransients) and watch's event log
// (eventTransients) name it. A process both name is one finding, high where
// the log shows a writable mapping or masquerade.
func transientGPUProcesses(c *comparison) []Finding {
	out := c.accountingTransients()
	byKey := make(map[string][]int, len(out)) // a process may have run on several GPUs
	for i, f := range out {
		if f.Process != nil {
			byKey[f.Process.Key()] = append(byKey[f.Process.Key()], i)
		}
	}
	for _, f := range c.eventTransients() {
		// Its accounting finding of the same GPU. A device that names no
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

package diff

// transientGPUProcesses: a process that used a GPU between FROM and TO and
// is gone at TO: the worker that ran for 40 ms, the miner that left before
// the epilog. Two snapshots are two instants; what ran between them is known
// from the driver's own records: NVML's accounting records at TO (see
// accountingTransients), where accounting is on.
func transientGPUProcesses(c *comparison) []Finding {
	return c.accountingTransients()
}

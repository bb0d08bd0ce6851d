package snapshot

// HiddenProcess is a PID the kernel still has whose /proc directory does not
// read as that process, as under a mount over /proc/PID that hides what it
// maps and holds. Only the capture's own pid namespace's procfs is probed,
// since another namespace's or a fixture tree's PIDs name no process
// pidfd_open could ask about.
type HiddenProcess struct {
	PID int `json:"pid"`
	// StartTime and Comm are the kernel's, where the BPF path's task walk
	// saw the process. They are zero and empty where /proc alone was read.
	StartTime uint64 `json:"start_time,omitempty"`
	Comm      string `json:"comm,omitempty"`
	// Why is what /proc showed instead, and how the kernel vouched for the PID.
	Why string `json:"why"`
}

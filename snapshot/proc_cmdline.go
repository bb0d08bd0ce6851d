package snapshot

import "bytes"

// /proc/PID/cmdline is the arguments, each ended by a NUL. A process may
// rewrite it (setproctitle), leaving no final NUL or spaces instead: the last
// argument is kept either way. A kernel thread's is empty.

func parseCmdline(data []byte) []string {
	data = bytes.TrimSuffix(data, []byte{0})
	if len(data) == 0 {
		return nil
	}
	var args []string
	for arg := range bytes.SplitSeq(data, []byte{0}) {
		args = append(args, string(arg))
	}
	return args
}

package procfs

import "strings"

// /proc/PID/cmdline is the arguments, each ended by a NUL. A process may
// rewrite it (setproctitle), leaving no final NUL or spaces instead, and the
// last argument is kept either way. A kernel thread's is empty.

// ParseCmdline splits the text of a command line into its arguments, which
// share the text's memory, in one allocation for them all.
func ParseCmdline(text string) []string {
	text = strings.TrimSuffix(text, "\x00")
	if text == "" {
		return nil
	}
	return strings.Split(text, "\x00")
}

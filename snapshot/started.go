package snapshot

import "time"

// UserHZ is USER_HZ, the unit of stat's starttime, which is 100 on every
// Linux ABI (sysconf(_SC_CLK_TCK) would need cgo for a constant).
const UserHZ = 100

// StartedAt is the wall time of a start time in clock ticks since boot
// (stat field 22, an event log's start_time), boot being the host's btime.
func StartedAt(boot time.Time, ticks uint64) time.Time {
	return boot.Add(time.Duration(ticks) * (time.Second / UserHZ))
}

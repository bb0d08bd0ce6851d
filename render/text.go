package render

import (
	"fmt"
	"strconv"
)

// humanSize prints bytes in binary units, as the kernel and nvidia-smi do.
func humanSize(n uint64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatUint(n, 10) + "B"
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(div), "KMGTP"[exp])
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

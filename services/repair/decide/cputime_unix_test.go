//go:build unix

package decide_test

import (
	"syscall"
	"time"
)

// cpuTime returns the CPU time the process has used, user and system; on a
// shared machine it shows the work a benchmark did apart from the time it
// waited for a core.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

package e2e_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of the CPU times in /proc/PID/stat (USER_HZ),
// 1/100 s on every Linux architecture Go supports.
const clockTick = 10 * time.Millisecond

// processCPU returns the CPU time, user and system, that process pid has
// used so far, from /proc/PID/stat.
func processCPU(pid int) (time.Duration, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: the fields that
	// count start after its closing parenthesis, with the state (field 3).
	s := string(raw)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(fields))
	}
	var total time.Duration
	for _, f := range fields[11:13] { // utime and stime, fields 14 and 15
		ticks, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		total += time.Duration(ticks) * clockTick
	}
	return total, nil
}

// processesCPU sums processCPU over pids.
func processesCPU(pids []int) (time.Duration, error) {
	var total time.Duration
	for _, pid := range pids {
		d, err := processCPU(pid)
		if err != nil {
			return 0, err
		}
		total += d
	}
	return total, nil
}

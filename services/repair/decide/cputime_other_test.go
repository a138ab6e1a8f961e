//go:build !unix

package decide_test

import "time"

// cpuTime is not measured here; benchmarks report zero.
func cpuTime() time.Duration { return 0 }

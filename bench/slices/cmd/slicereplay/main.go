// Command slicereplay prints, as Markdown tables, the EndpointSlice writes
// Plexus's packing core and the Kubernetes EndpointSlice reconciler make on
// the same seeded churn traces.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/plexusnet/plexus/bench/slices"
)

func main() {
	seeds := flag.Int("seeds", 5, "traces per mode, seeded 1..seeds")
	initial := flag.Int("initial", 1000, "endpoints at the start of a trace")
	steps := flag.Int("steps", 500, "churn steps")
	maxChanges := flag.Int("max-changes", 20, "changes per churn step, at most")
	batch := flag.Int("batch-percent", 10, "rollout batch, percent of the endpoints")
	maxPerSlice := flag.Int("max-endpoints-per-slice", 100, "slice capacity")
	peerRuns := flag.Int("peer-runs", 3, "runs of the peer per trace (its placement is random)")
	flag.Parse()

	var cs []slices.Comparison
	for _, mode := range []slices.Mode{slices.ModeKinds, slices.ModeMixed} {
		for seed := 1; seed <= *seeds; seed++ {
			cfg := slices.Config{Seed: uint64(seed), Mode: mode, Initial: *initial, Steps: *steps,
				MaxChanges: *maxChanges, BatchPercent: *batch, MaxEndpointsPerSlice: *maxPerSlice}
			c, err := slices.Compare(cfg, *peerRuns)
			if err != nil {
				fmt.Fprintln(os.Stderr, "slicereplay:", err)
				os.Exit(1)
			}
			cs = append(cs, c)
		}
	}
	fmt.Print(slices.Markdown(cs))
}

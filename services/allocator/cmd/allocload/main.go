// Command allocload measures the allocator from outside, as its clients
// see it: concurrent gRPC clients allocate (and release, or allocate in
// batches) for a while and the tool prints throughput and latency
// percentiles.
//
//	allocload [load] --addr 127.0.0.1:7401 --clients 64 --duration 10s --mode allocate
//	allocload prefill --file plexus-allocator.db --count 1000000
//	allocload startup --binary bin/allocator --store bolt:plexus-allocator.db --runs 5
//	allocload watches --addr 127.0.0.1:7401 --pool load --watches 2000 --conns 4 --pid PID
//	allocload probe --addr 127.0.0.1:7401 --interval 20ms --duration 30s
//
// load (the default) runs the clients. prefill writes allocations straight
// into a store (a bolt file, or etcd with --store), through the store's
// API, to make a big store quickly. startup starts an allocator binary several times and reports how
// long it takes until its health service says SERVING. watches opens many
// WatchAllocations streams together and reports how long their snapshots
// took, how health checks fared meanwhile and the allocator's memory.
// probe sends health checks from a process of its own, to watch a load
// from outside it.
package main

import (
	"fmt"
	"io"
	"os"
	"strings"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "allocload:", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	cmd := "load"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "load":
		return runLoad(args, out)
	case "prefill":
		return runPrefill(args, out)
	case "startup":
		return runStartup(args, out)
	case "watches":
		return runWatches(args, out)
	case "probe":
		return runProbe(args, out)
	}
	return fmt.Errorf("unknown command %q (load, prefill, startup, watches or probe)", cmd)
}

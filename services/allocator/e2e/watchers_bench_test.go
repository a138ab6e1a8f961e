package e2e_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	"github.com/plexusnet/plexus/internal/dial"
)

// BenchmarkWatchersOnEtcd measures what open WatchAllocations streams cost
// an allocator on etcd while 64 clients allocate: 500 streams, each
// watching a quiet pool of its own agent's (not the one being allocated
// from), as a fleet of agents would hold them. Their watches share the
// replica's one etcd watch (the default), or each has an etcd watch of its
// own (--etcd-watch-history=-1, how every watch worked before), against no
// streams at all; the allocator and etcd's CPU per allocation, in one run.
//
//	go test -run '^$' -bench WatchersOnEtcd -benchtime 1x -count 3 ./services/allocator/e2e/
func BenchmarkWatchersOnEtcd(b *testing.B) {
	allocload := buildAllocload(b)
	const streams = 500
	run := func(history, watches int) (perSec float64, cpuPerCall float64) {
		e := fsyncEtcd(b)
		a := startAllocator(b, "--store=etcd:"+e.Endpoints()[0], "--etcd-watch-history="+strconv.Itoa(history), "--max-watches=0")
		defer a.kill()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var conns []*grpc.ClientConn
		for range 4 {
			conn, err := dial.New(a.grpcAddr, dial.WithoutRetry())
			require.NoError(b, err)
			defer conn.Close()
			conns = append(conns, conn)
		}
		c := allocatorv1.NewAllocatorServiceClient(conns[0])
		_, err := c.CreatePool(ctx, &allocatorv1.CreatePoolRequest{PoolId: "agents", Pool: &allocatorv1.Pool{Cidrs: []string{"192.168.0.0/24"}}})
		require.NoError(b, err)
		for i := range watches {
			s, err := allocatorv1.NewAllocatorServiceClient(conns[i%len(conns)]).WatchAllocations(ctx, &allocatorv1.WatchAllocationsRequest{Pool: "pools/agents", BatchSnapshot: true})
			require.NoError(b, err)
			for {
				ev, err := s.Recv()
				require.NoError(b, err)
				if ev.GetType() == allocatorv1.EventType_EVENT_TYPE_SYNCED {
					break
				}
			}
		}
		rate, _, cpu := measureLoad(b, allocload, []string{"--addr=" + a.grpcAddr, "--conns=4", "--pool=scale"}, []int{a.cmd.Process.Pid, e.Pid()})
		return rate, float64(cpu.Microseconds())
	}
	for b.Loop() {
		noneRate, noneCPU := run(0, 0)
		sharedRate, sharedCPU := run(0, streams)
		ownRate, ownCPU := run(-1, streams)
		b.ReportMetric(noneRate, "none-allocs/s")
		b.ReportMetric(noneCPU, "none-cpu-us/alloc")
		b.ReportMetric(sharedRate, fmt.Sprintf("shared%d-allocs/s", streams))
		b.ReportMetric(sharedCPU, fmt.Sprintf("shared%d-cpu-us/alloc", streams))
		b.ReportMetric(ownRate, fmt.Sprintf("own%d-allocs/s", streams))
		b.ReportMetric(ownCPU, fmt.Sprintf("own%d-cpu-us/alloc", streams))
		b.ReportMetric(sharedCPU/ownCPU, "shared/own-cpu")
		b.ReportMetric(sharedRate/ownRate, "shared/own-allocs")
	}
}

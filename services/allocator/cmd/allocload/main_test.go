package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/internal/config"
	rt "github.com/plexusnet/plexus/internal/server"
	"github.com/plexusnet/plexus/internal/testing/kubetest"
	"github.com/plexusnet/plexus/internal/testing/servertest"
	"github.com/plexusnet/plexus/services/allocator/allocation"
	allocserver "github.com/plexusnet/plexus/services/allocator/server"
	"github.com/plexusnet/plexus/services/allocator/store"
	"github.com/plexusnet/plexus/services/allocator/store/memory"
)

// serve runs an allocator on st until the test ends and returns its
// address.
func serve(t *testing.T, st store.Store) string {
	t.Helper()
	cfg := config.New(config.Allocator)
	cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := rt.New(*cfg, "allocator", rt.WithLogger(logger), rt.WithoutSignalHandling(), rt.WithDrainDelay(0))
	require.NoError(t, err)
	svc, err := allocation.New(context.Background(), st, allocation.WithLogger(logger))
	require.NoError(t, err)
	allocserver.New(svc, nil).Register(srv.GRPC())
	servertest.Serve(t, srv)
	return srv.GRPCAddr()
}

func loadJSON(t *testing.T, args ...string) report {
	t.Helper()
	var out bytes.Buffer
	require.NoError(t, run(append([]string{"load", "--format=json", "--timeout=10s"}, args...), &out))
	var rep report
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep), out.String())
	return rep
}

func TestLoadModes(t *testing.T) {
	addr := serve(t, memory.New())

	rep := loadJSON(t, "--addr", addr, "--clients=4", "--conns=2", "--requests=200", "--mode=allocate", "--pool=a", "--cidr=10.0.0.0/16")
	require.Len(t, rep.Ops, 1)
	require.Equal(t, "Allocate", rep.Ops[0].Method)
	require.Equal(t, 200, rep.Ops[0].Calls)
	require.Empty(t, rep.Ops[0].Errors)
	require.Equal(t, 200, rep.Addresses)
	require.Positive(t, rep.Ops[0].PerSec)
	require.LessOrEqual(t, rep.Ops[0].P50, rep.Ops[0].P99)
	require.LessOrEqual(t, rep.Ops[0].P99, rep.Ops[0].Max)

	// allocate-release on a pool of 6 addresses with 4 clients: every
	// address comes back, so nothing runs out.
	rep = loadJSON(t, "--addr", addr, "--clients=4", "--requests=100", "--mode=allocate-release", "--pool=tiny", "--cidr=10.1.0.0/29")
	require.Len(t, rep.Ops, 2)
	require.Equal(t, "Allocate", rep.Ops[0].Method)
	require.Equal(t, "Release", rep.Ops[1].Method)
	require.Equal(t, 100, rep.Ops[0].Calls)
	require.Equal(t, 100, rep.Ops[1].Calls)
	require.Empty(t, rep.Ops[0].Errors)

	// allocate-get reads every allocation back through the other
	// connection, at the etag it was allocated at.
	rep = loadJSON(t, "--addr", addr, "--clients=4", "--conns=2", "--requests=100", "--mode=allocate-get", "--pool=a")
	require.Len(t, rep.Ops, 2)
	require.Equal(t, "Allocate", rep.Ops[0].Method)
	require.Equal(t, "GetAllocation", rep.Ops[1].Method)
	require.Equal(t, 100, rep.Ops[1].Calls)
	require.Empty(t, rep.Ops[1].Errors)

	rep = loadJSON(t, "--addr", addr, "--clients=2", "--requests=6", "--mode=batch", "--batch-size=50", "--pool=a")
	require.Len(t, rep.Ops, 1)
	require.Equal(t, "BatchAllocate", rep.Ops[0].Method)
	require.Equal(t, 6, rep.Ops[0].Calls)
	require.Equal(t, 300, rep.Addresses)

	// Errors are counted by code and reason, not hidden: a pool of six
	// addresses runs out.
	rep = loadJSON(t, "--addr", addr, "--clients=1", "--requests=10", "--mode=allocate", "--pool=full", "--cidr=10.2.0.0/29")
	require.Equal(t, 6, rep.Ops[0].Calls)
	require.Equal(t, map[string]int{"ResourceExhausted/POOL_EXHAUSTED": 4}, rep.Ops[0].Errors)

	// A duration run stops on time.
	start := time.Now()
	rep = loadJSON(t, "--addr", addr, "--clients=2", "--duration=300ms", "--warmup=100ms", "--pool=a")
	require.Less(t, time.Since(start), 5*time.Second)
	require.Equal(t, 300*time.Millisecond, rep.Window)
	require.Positive(t, rep.Ops[0].Calls)

	var text bytes.Buffer
	require.NoError(t, run([]string{"--addr", addr, "--clients=1", "--requests=5", "--pool=a"}, &text))
	require.Contains(t, text.String(), "Allocate")
	require.Contains(t, text.String(), "addresses allocated: 5")
}

func TestLoadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--clients=0"},
		{"--mode=release"},
		{"--mode=batch", "--batch-size=0"},
		{"--format=xml"},
		{"--requests=-1"},
	} {
		require.Error(t, run(append([]string{"load"}, args...), io.Discard), "%v", args)
	}
	require.Error(t, run([]string{"nosuchcommand"}, io.Discard))
}

// prefilled runs prefill with args, then restores an allocator from the
// store spec names and returns its view of pool "big".
func prefilled(t *testing.T, spec string, args ...string) allocation.PoolView {
	t.Helper()
	var out bytes.Buffer
	require.NoError(t, run(append([]string{"prefill", "--pool", "big", "--cidr", "10.0.0.0/20"}, args...), &out))
	require.Contains(t, out.String(), "allocations")
	st, err := openStore(spec)
	require.NoError(t, err)
	defer st.Close()
	svc, err := allocation.New(context.Background(), st, allocation.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	require.NoError(t, err)
	v, err := svc.GetPool("big")
	require.NoError(t, err)
	return v
}

func TestPrefillMakesAStoreTheAllocatorRestores(t *testing.T) {
	file := filepath.Join(t.TempDir(), "prefill.db")
	v := prefilled(t, "bolt:"+file, "--file", file, "--count", "3000", "--txn-size", "700")
	require.Equal(t, uint64(3000), v.Stats.Allocated)
	require.Equal(t, "1094", v.Stats.Free.String()) // 4094 usable addresses in a /20

	// The same pool cannot be filled twice.
	require.ErrorContains(t, run([]string{"prefill", "--file", file, "--pool", "big", "--count", "1"}, io.Discard), "already exists")
}

// TestPrefillEtcd: prefill fills etcd as well (--store), in transactions
// within etcd's default --max-txn-ops; one of --file and --store is
// needed, not both.
func TestPrefillEtcd(t *testing.T) {
	spec := "etcd:" + kubetest.StartEtcd(t).Endpoint()
	v := prefilled(t, spec, "--store", spec, "--count", "700", "--txn-size", "30")
	require.Equal(t, uint64(700), v.Stats.Allocated)

	require.ErrorContains(t, run([]string{"prefill", "--count", "1"}, io.Discard), "one of --file and --store")
	require.ErrorContains(t, run([]string{"prefill", "--store", spec, "--file", "x.db", "--count", "1"}, io.Discard), "one of --file and --store")
}

func TestPrefillStopsAtTheEndOfTheCIDR(t *testing.T) {
	file := filepath.Join(t.TempDir(), "small.db")
	// A /29 has six usable addresses: .1 to .6; .7 is the broadcast.
	require.ErrorContains(t, run([]string{"prefill", "--file", file, "--cidr", "10.0.0.0/29", "--count", "7"}, io.Discard), "fewer than 7")
	file = filepath.Join(t.TempDir(), "exact.db")
	require.NoError(t, run([]string{"prefill", "--file", file, "--cidr", "10.0.0.0/29", "--count", "6"}, io.Discard))
}

func TestPercentile(t *testing.T) {
	ms := func(vs ...int) []time.Duration {
		out := make([]time.Duration, len(vs))
		for i, v := range vs {
			out[i] = time.Duration(v) * time.Millisecond
		}
		return out
	}
	tests := []struct {
		values []time.Duration
		p      float64
		want   time.Duration
	}{
		{ms(), 50, 0},
		{ms(7), 99, 7 * time.Millisecond},
		{ms(1, 2, 3, 4), 50, 2 * time.Millisecond},
		{ms(1, 2, 3, 4), 51, 3 * time.Millisecond},
		{ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 90, 9 * time.Millisecond},
		{ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 99, 10 * time.Millisecond},
		{ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 100, 10 * time.Millisecond},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, percentile(tc.values, tc.p), "p%v of %v", tc.p, tc.values)
	}
}

func TestWatchesAndProbe(t *testing.T) {
	addr := serve(t, memory.New())
	loadJSON(t, "--addr", addr, "--clients=2", "--requests=50", "--pool=w", "--cidr=10.0.0.0/24")

	var out bytes.Buffer
	require.NoError(t, run([]string{"watches", "--addr", addr, "--pool=w", "--watches=20", "--conns=2", "--batch", "--timeout=20s", "--pid", strconv.Itoa(os.Getpid())}, &out))
	require.Contains(t, out.String(), "20 watches of pools/w over 2 connections")
	require.Contains(t, out.String(), "; 0 failed")
	require.Regexp(t, `health checks: [1-9]\d*, 0 failed or not SERVING`, out.String())
	require.Regexp(t, `allocator memory: [1-9]\d* MB \(anon [1-9]\d*, file \d+\) before`, out.String())

	// A watch of a pool that does not exist fails, and says so.
	require.ErrorContains(t, run([]string{"watches", "--addr", addr, "--pool=nosuch", "--watches=2", "--conns=1", "--probe=false"}, io.Discard), "2 watches failed")

	out.Reset()
	require.NoError(t, run([]string{"probe", "--addr", addr, "--interval=10ms", "--duration=200ms"}, &out))
	require.Regexp(t, `^health checks: [1-9]\d*, 0 failed or not SERVING, p50 `, out.String())
	require.Error(t, run([]string{"probe", "--addr", addr, "--interval=0"}, io.Discard))
}

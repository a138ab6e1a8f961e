package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	"github.com/plexusnet/plexus/internal/dial"
)

// watchesConfig says how many watches to open on which pool.
type watchesConfig struct {
	addr    string
	pool    string
	watches int
	conns   int
	pid     int
	timeout time.Duration
	batch   bool
	probe   bool
}

// runWatches opens --watches WatchAllocations streams of --pool together
// over --conns connections, waits until every one has its snapshot
// (SYNCED), and reports how long each took, how long health checks took
// meanwhile, and (with --pid) the allocator's resident memory before,
// at its highest while the watches started, and after they closed.
func runWatches(args []string, out io.Writer) error {
	cfg, err := parseWatches(args)
	if err != nil {
		return err
	}
	conns := make([]*grpc.ClientConn, cfg.conns)
	for i := range conns {
		cc, err := dial.New(cfg.addr, dial.WithoutRetry())
		if err != nil {
			return err
		}
		defer cc.Close()
		conns[i] = cc
	}
	before := memOf(cfg.pid)
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()

	smp := startSampler(ctx, cfg, conns[0], before)
	start := time.Now()
	synced, errs := openWatches(ctx, cfg, conns, start)
	all := time.Since(start)
	smp.stop()
	time.Sleep(2 * time.Second) // the load under test: the server lets go of the streams in its own time
	after := memOf(cfg.pid)

	failed := 0
	var firstErr error
	for _, err := range errs {
		if err != nil {
			failed++
			firstErr = cmp.Or(firstErr, err)
		}
	}
	slices.Sort(synced)
	fmt.Fprintf(out, "%d watches of pools/%s over %d connections: all synced after %s (p50 %s, p99 %s); %d failed\n",
		cfg.watches, cfg.pool, cfg.conns, all.Round(time.Millisecond), percentile(synced, 50).Round(time.Millisecond), percentile(synced, 99).Round(time.Millisecond), failed)
	if cfg.probe {
		fmt.Fprintln(out, probeSummary(smp.healthTimes, smp.healthFails), "(meanwhile)")
	}
	if cfg.pid != 0 {
		fmt.Fprintf(out, "allocator memory: %s before, %s at most while starting, %s after closing\n", before, smp.peak, after)
	}
	if firstErr != nil {
		return fmt.Errorf("%d watches failed, the first: %w", failed, firstErr)
	}
	return nil
}

func parseWatches(args []string) (watchesConfig, error) {
	var cfg watchesConfig
	fs := pflag.NewFlagSet("watches", pflag.ContinueOnError)
	fs.StringVar(&cfg.addr, "addr", "127.0.0.1:7401", "allocator gRPC address")
	fs.StringVar(&cfg.pool, "pool", "load", "pool to watch")
	fs.IntVar(&cfg.watches, "watches", 2000, "watches to open together")
	fs.IntVar(&cfg.conns, "conns", 4, "gRPC connections the watches share")
	fs.IntVar(&cfg.pid, "pid", 0, "the allocator's process id, to read its resident memory from /proc (0: not measured)")
	fs.DurationVar(&cfg.timeout, "timeout", 2*time.Minute, "give up after this long")
	fs.BoolVar(&cfg.batch, "batch", false, "ask for the snapshot in batches (batch_snapshot) instead of one message per allocation")
	fs.BoolVar(&cfg.probe, "probe", true, "send health checks while the watches start (turn off when allocload probe runs in a process of its own)")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if cfg.watches <= 0 || cfg.conns <= 0 {
		return cfg, errors.New("--watches and --conns must be positive")
	}
	return cfg, nil
}

// sampler checks health (with --probe) and reads the allocator's memory
// every 20 ms until stopped.
type sampler struct {
	done chan struct{}
	wg   sync.WaitGroup

	mu          sync.Mutex
	healthTimes []check
	healthFails int
	peak        procMemory
}

func startSampler(ctx context.Context, cfg watchesConfig, cc *grpc.ClientConn, before procMemory) *sampler {
	smp := &sampler{done: make(chan struct{}), peak: before}
	hc := healthpb.NewHealthClient(cc)
	smp.wg.Go(func() {
		for {
			if cfg.probe {
				smp.probe(ctx, hc)
			}
			smp.mu.Lock()
			if m := memOf(cfg.pid); m.total() > smp.peak.total() {
				smp.peak = m
			}
			smp.mu.Unlock()
			select {
			case <-smp.done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	return smp
}

func (smp *sampler) probe(ctx context.Context, hc healthpb.HealthClient) {
	start := time.Now()
	hctx, hcancel := context.WithTimeout(ctx, 5*time.Second)
	resp, err := hc.Check(hctx, &healthpb.HealthCheckRequest{})
	hcancel()
	smp.mu.Lock()
	defer smp.mu.Unlock()
	smp.healthTimes = append(smp.healthTimes, check{start, time.Since(start)})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		smp.healthFails++
	}
}

// stop ends the sampling and waits for it.
func (smp *sampler) stop() {
	close(smp.done)
	smp.wg.Wait()
}

// openWatches opens the watches together and waits until each is synced
// or failed; synced[i] is how long after start watch i synced.
func openWatches(ctx context.Context, cfg watchesConfig, conns []*grpc.ClientConn, start time.Time) (synced []time.Duration, errs []error) {
	synced, errs = make([]time.Duration, cfg.watches), make([]error, cfg.watches)
	var wg sync.WaitGroup
	streams := make([]context.CancelFunc, cfg.watches)
	for i := range cfg.watches {
		sctx, scancel := context.WithCancel(ctx)
		streams[i] = scancel
		wg.Go(func() {
			client := allocatorv1.NewAllocatorServiceClient(conns[i%len(conns)])
			stream, err := client.WatchAllocations(sctx, &allocatorv1.WatchAllocationsRequest{Pool: "pools/" + cfg.pool, BatchSnapshot: cfg.batch})
			if err != nil {
				errs[i] = err
				return
			}
			for {
				ev, err := stream.Recv()
				if err != nil {
					errs[i] = err
					return
				}
				if ev.GetType() == allocatorv1.EventType_EVENT_TYPE_SYNCED {
					synced[i] = time.Since(start)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, c := range streams {
		c()
	}
	return synced, errs
}

// procMemory is a process's resident memory, from /proc: anonymous pages
// (heap, stacks, the runtime's own) and file pages (the binary's code,
// the store file's mapped pages, which the kernel can drop and read again),
// and the most it has held (VmHWM).
type procMemory struct{ anon, file, peak int64 }

func (m procMemory) total() int64 { return m.anon + m.file }

func (m procMemory) String() string {
	return fmt.Sprintf("%d MB (anon %d, file %d)", m.total()>>20, m.anon>>20, m.file>>20)
}

// memOf reads pid's resident memory (zero when pid is 0 or unreadable).
func memOf(pid int) procMemory {
	var m procMemory
	if pid == 0 {
		return m
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return m
	}
	for _, line := range strings.Split(string(b), "\n") {
		for key, dst := range map[string]*int64{"RssAnon:": &m.anon, "RssFile:": &m.file, "RssShmem:": &m.file, "VmHWM:": &m.peak} {
			if rest, ok := strings.CutPrefix(line, key); ok {
				if kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64); err == nil {
					*dst += kb << 10
				}
			}
		}
	}
	return m
}

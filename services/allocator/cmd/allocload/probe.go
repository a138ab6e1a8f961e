package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/spf13/pflag"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/plexusnet/plexus/internal/dial"
)

// runProbe sends a health check every --interval for --duration, on a
// connection of its own, and reports how long they took. Run it as a
// process of its own beside a load (watches, load) to see what a
// kubelet's or a load balancer's probe would see, without the load
// tool's own work on the same cores in the way.
func runProbe(args []string, out io.Writer) error {
	fs := pflag.NewFlagSet("probe", pflag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:7401", "allocator gRPC address")
	interval := fs.Duration("interval", 20*time.Millisecond, "pause between two checks")
	duration := fs.Duration("duration", 30*time.Second, "how long to probe")
	timeout := fs.Duration("timeout", 5*time.Second, "deadline of each check")
	slow := fs.Duration("slow", 50*time.Millisecond, "list the checks that took longer than this, with when they started")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *interval <= 0 || *duration <= 0 || *timeout <= 0 {
		return errors.New("--interval, --duration and --timeout must be positive")
	}
	cc, err := dial.New(*addr, dial.WithoutRetry())
	if err != nil {
		return err
	}
	defer cc.Close()
	hc := healthpb.NewHealthClient(cc)
	begin := time.Now()
	times, failed := probe(context.Background(), hc, *interval, begin.Add(*duration), *timeout)
	fmt.Fprintln(out, probeSummary(times, failed))
	for _, c := range times {
		if c.took > *slow {
			fmt.Fprintf(out, "  slow: %s at %s\n", c.took.Round(time.Microsecond), c.at.Sub(begin).Round(time.Millisecond))
		}
	}
	return nil
}

// check is one health check: when it started and how long it took.
type check struct {
	at   time.Time
	took time.Duration
}

// probe checks health every interval until end, and returns the checks
// and how many failed.
func probe(ctx context.Context, hc healthpb.HealthClient, interval time.Duration, end time.Time, timeout time.Duration) ([]check, int) {
	var (
		times  []check
		failed int
	)
	for time.Now().Before(end) {
		start := time.Now()
		cctx, cancel := context.WithTimeout(ctx, timeout)
		resp, err := hc.Check(cctx, &healthpb.HealthCheckRequest{})
		cancel()
		times = append(times, check{start, time.Since(start)})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			failed++
		}
		select {
		case <-ctx.Done():
			return times, failed
		case <-time.After(interval):
		}
	}
	return times, failed
}

// probeSummary is one line on a run of health checks.
func probeSummary(checks []check, failed int) string {
	ts := make([]time.Duration, len(checks))
	for i, c := range checks {
		ts[i] = c.took
	}
	slices.Sort(ts)
	return fmt.Sprintf("health checks: %d, %d failed or not SERVING, p50 %s, p99 %s, max %s", len(ts), failed,
		percentile(ts, 50).Round(time.Microsecond), percentile(ts, 99).Round(time.Microsecond), percentile(ts, 100).Round(time.Microsecond))
}

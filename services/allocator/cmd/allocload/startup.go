package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	"github.com/plexusnet/plexus/internal/dial"
)

// startupConfig says which allocator to start and how often.
type startupConfig struct {
	binary  string
	store   string
	runs    int
	timeout time.Duration
	extra   []string
}

func runStartup(args []string, out io.Writer) error {
	var cfg startupConfig
	fs := pflag.NewFlagSet("startup", pflag.ContinueOnError)
	fs.StringVar(&cfg.binary, "binary", "bin/allocator", "the plexus-allocator binary")
	fs.StringVar(&cfg.store, "store", "", "its --store, e.g. bolt:FILE (required)")
	fs.IntVar(&cfg.runs, "runs", 5, "how many starts to time")
	fs.DurationVar(&cfg.timeout, "timeout", 2*time.Minute, "give up on a start after this long")
	fs.StringSliceVar(&cfg.extra, "arg", nil, "further allocator flag, e.g. --arg=--log-level=warn (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if cfg.store == "" {
		return errors.New("--store is required")
	}
	if cfg.runs <= 0 {
		return errors.New("--runs must be positive")
	}
	var (
		times []time.Duration
		peaks []int64
	)
	for i := range cfg.runs {
		d, mem, err := timeStartup(cfg)
		if err != nil {
			return fmt.Errorf("run %d: %w", i+1, err)
		}
		times, peaks = append(times, d), append(peaks, mem.peak)
		fmt.Fprintf(out, "run %d: SERVING after %s, resident %s, %d MB at most\n", i+1, d.Round(time.Millisecond), mem, mem.peak>>20)
	}
	slices.Sort(times)
	slices.Sort(peaks)
	_, err := fmt.Fprintf(out, "median %s (min %s, max %s) over %d runs; resident at most: median %d MB\n",
		times[len(times)/2].Round(time.Millisecond), times[0].Round(time.Millisecond), times[len(times)-1].Round(time.Millisecond), len(times), peaks[len(peaks)/2]>>20)
	return err
}

// timeStartup starts the allocator on free loopback ports and returns the
// time from exec until its allocator service reports SERVING over
// grpc.health.v1, and its resident memory then (with the most it held
// until then); then it stops the process with SIGTERM.
func timeStartup(cfg startupConfig) (time.Duration, procMemory, error) {
	args := append([]string{"--store=" + cfg.store, "--grpc-addr=127.0.0.1:0", "--http-addr=127.0.0.1:0", "--log-format=json"}, cfg.extra...)
	cmd := exec.Command(cfg.binary, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return 0, procMemory{}, err
	}
	begin := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, procMemory{}, err
	}
	exited := make(chan error, 1)
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var rec struct {
				Msg  string `json:"msg"`
				GRPC string `json:"grpc_addr"`
			}
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "serving" && rec.GRPC != "" {
				select {
				case addr <- rec.GRPC:
				default:
				}
			}
		}
		exited <- cmd.Wait()
	}()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}()

	deadline := time.Now().Add(cfg.timeout)
	var target string
	select {
	case target = <-addr:
	case err := <-exited:
		exited <- err // for the deferred stop
		return 0, procMemory{}, fmt.Errorf("allocator exited before serving: %v", err)
	case <-time.After(cfg.timeout):
		return 0, procMemory{}, errors.New("allocator did not announce its address")
	}
	conn, err := dial.New(target, dial.WithoutRetry())
	if err != nil {
		return 0, procMemory{}, err
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: allocatorv1.AllocatorService_ServiceDesc.ServiceName})
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return time.Since(begin), memOf(cmd.Process.Pid), nil
		}
		if time.Now().After(deadline) {
			return 0, procMemory{}, fmt.Errorf("not SERVING after %s: %v", cfg.timeout, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

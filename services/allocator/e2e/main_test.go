package e2e_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	"github.com/plexusnet/plexus/internal/dial"
)

// Binaries built once for the whole run by TestMain.
var bins struct {
	allocator string
	plexusctl string
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "plexus-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	bins.allocator = filepath.Join(dir, "plexus-allocator")
	bins.plexusctl = filepath.Join(dir, "plexusctl")
	for out, pkg := range map[string]string{
		bins.allocator: "github.com/plexusnet/plexus/services/allocator",
		bins.plexusctl: "github.com/plexusnet/plexus/clients/plexusctl",
	} {
		// go test puts its own toolchain first on PATH.
		cmd := exec.Command("go", "build", "-o", out, pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n%s", pkg, err, b)
			return 1
		}
	}
	return m.Run()
}

// allocator is one running plexus-allocator process.
type allocator struct {
	cmd      *exec.Cmd
	grpcAddr string
	httpAddr string
	logs     *tail
	exited   chan struct{}
	waitErr  error
}

// tail keeps the last lines a process wrote, to show when a test fails.
type tail struct {
	mu    sync.Mutex
	lines []string
}

func (l *tail) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) == 40 {
		l.lines = l.lines[1:]
	}
	l.lines = append(l.lines, s)
}

func (l *tail) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// cleanEnv is the test's environment without the variables that would
// change how the binaries behave (flags from PLEXUS_*, exporters from
// OTEL_*).
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PLEXUS_") && !strings.HasPrefix(kv, "OTEL_") {
			env = append(env, kv)
		}
	}
	return env
}

// startAllocator runs the allocator on free loopback ports with args
// (for example "--store=bolt:FILE") and waits until its health service
// says SERVING. The process is killed when the test ends, if still up.
func startAllocator(t testing.TB, args ...string) *allocator {
	t.Helper()
	a, err := launch(args...)
	require.NoError(t, err)
	t.Cleanup(func() {
		a.kill()
		if t.Failed() {
			t.Logf("allocator log (last lines):\n%s", a.logs)
		}
	})
	return a
}

// launch starts the process and waits for it to serve.
func launch(args ...string) (*allocator, error) {
	cmd := exec.Command(bins.allocator, append([]string{
		"--grpc-addr=127.0.0.1:0", "--http-addr=127.0.0.1:0", "--log-format=json", "--drain-timeout=5s",
	}, args...)...)
	cmd.Env = cleanEnv()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	a := &allocator{cmd: cmd, logs: &tail{}, exited: make(chan struct{})}
	addrs := make(chan [2]string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			a.logs.add(line)
			var rec struct {
				Msg  string `json:"msg"`
				GRPC string `json:"grpc_addr"`
				HTTP string `json:"http_addr"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "serving" && rec.GRPC != "" {
				select {
				case addrs <- [2]string{rec.GRPC, rec.HTTP}:
				default:
				}
			}
		}
		// All output is read: now Wait may reap the process.
		a.waitErr = cmd.Wait()
		close(a.exited)
	}()
	select {
	case got := <-addrs:
		a.grpcAddr, a.httpAddr = got[0], got[1]
	case <-a.exited:
		return nil, fmt.Errorf("allocator exited before serving: %v\n%s", a.waitErr, a.logs)
	case <-time.After(30 * time.Second):
		a.kill()
		return nil, fmt.Errorf("allocator did not announce its addresses\n%s", a.logs)
	}
	if err := a.waitServing(30 * time.Second); err != nil {
		a.kill()
		return nil, fmt.Errorf("%w\n%s", err, a.logs)
	}
	return a, nil
}

// waitServing polls grpc.health.v1 for the allocator service.
func (a *allocator) waitServing(timeout time.Duration) error {
	conn, err := dial.New(a.grpcAddr, dial.WithoutRetry())
	if err != nil {
		return err
	}
	defer conn.Close()
	return waitHealth(conn, timeout)
}

func waitHealth(conn grpc.ClientConnInterface, timeout time.Duration) error {
	hc := healthpb.NewHealthClient(conn)
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: allocatorv1.AllocatorService_ServiceDesc.ServiceName})
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("allocator not SERVING after %s: %v %v", timeout, resp.GetStatus(), err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// kill ends the process with SIGKILL, as a crash or the OOM killer would,
// and reaps it.
func (a *allocator) kill() {
	select {
	case <-a.exited:
		return
	default:
	}
	_ = a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.exited
}

// stop asks for a graceful shutdown and returns how the process exited.
func (a *allocator) stop(timeout time.Duration) error {
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case <-a.exited:
		return a.waitErr
	case <-time.After(timeout):
		a.kill()
		return errors.New("allocator did not stop on SIGTERM")
	}
}

// conn dials the allocator without retries, so a test sees every failure
// as it happens.
func (a *allocator) conn(t *testing.T) *grpc.ClientConn {
	t.Helper()
	conn, err := dial.New(a.grpcAddr, dial.WithoutRetry())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// client is an allocator client on a new connection (see conn).
func (a *allocator) client(t *testing.T) allocatorv1.AllocatorServiceClient {
	t.Helper()
	return allocatorv1.NewAllocatorServiceClient(a.conn(t))
}

func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// listAll returns every allocation of pool that c lists, page by page.
func listAll(ctx context.Context, c allocatorv1.AllocatorServiceClient, pool string) ([]*allocatorv1.Allocation, error) {
	var out []*allocatorv1.Allocation
	req := &allocatorv1.ListAllocationsRequest{Pool: "pools/" + pool, PageSize: 1000}
	for {
		resp, err := c.ListAllocations(ctx, req)
		if err != nil {
			return nil, err
		}
		out = append(out, resp.GetAllocations()...)
		if resp.GetNextPageToken() == "" {
			return out, nil
		}
		req.PageToken = resp.GetNextPageToken()
	}
}

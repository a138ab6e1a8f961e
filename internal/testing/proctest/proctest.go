// Package proctest runs the project's own binaries in tests: it builds a
// main package once per test process, starts it on free loopback ports,
// waits until its gRPC health check answers SERVING, and stops it (or kills
// it) when asked or when the test ends.
package proctest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

var (
	buildMu  sync.Mutex
	builtDir string
	built    = map[string]string{}
)

// moduleRoot finds the directory holding the main module's go.mod.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("not inside the module")
	}
	return filepath.Dir(mod), nil
}

// Build compiles the main package pkg (a path relative to the module root,
// such as "./services/allocator") once per test process and returns the
// binary's path.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := built[pkg]; ok {
		return p
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	if builtDir == "" {
		// One folder per checkout, reused by every test process: the
		// binaries are replaced, not piled up run after run.
		sum := sha256.Sum256([]byte(root))
		builtDir = filepath.Join(os.TempDir(), "plexus-bin", hex.EncodeToString(sum[:6]))
		if err := os.MkdirAll(builtDir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(builtDir, filepath.Base(pkg))
	// Built aside and renamed into place: a test process running the
	// binary of that name keeps running the one it started.
	tmp := fmt.Sprintf("%s.%d.tmp", out, os.Getpid())
	cmd := exec.Command("go", "build", "-o", tmp, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		_ = os.Remove(tmp)
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	if err := os.Rename(tmp, out); err != nil {
		t.Fatal(err)
	}
	built[pkg] = out
	return out
}

// FreeAddr returns a loopback address with a port free at the time of the
// call.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Proc is a running service process.
type Proc struct {
	t        testing.TB
	bin      string
	args     []string
	env      []string
	GRPCAddr string
	HTTPAddr string
	LogPath  string
	health   *tls.Config
	cmd      *exec.Cmd
	done     chan struct{}
	waitErr  error
}

// Option configures Start.
type Option func(*Proc)

// WithEnv adds environment variables (KEY=VALUE) to the process.
func WithEnv(kv ...string) Option { return func(p *Proc) { p.env = append(p.env, kv...) } }

// WithHealthTLS makes the health checks dial the process with cfg: for a
// process that serves (mutual) TLS.
func WithHealthTLS(cfg *tls.Config) Option { return func(p *Proc) { p.health = cfg } }

// WithAddrs serves on the given --grpc-addr and --http-addr instead of
// free ports: for a process that takes the place of one that stopped, as
// a new build of a service replacing the old one behind the same address.
func WithAddrs(grpcAddr, httpAddr string) Option {
	return func(p *Proc) { p.GRPCAddr, p.HTTPAddr = grpcAddr, httpAddr }
}

// Start runs bin, any binary of the project's (Build's, or another
// build's, such as a release's), with args plus --grpc-addr and
// --http-addr on free loopback ports and waits until its health check
// answers SERVING. The process is stopped when the test ends.
func Start(t testing.TB, bin string, args []string, opts ...Option) *Proc {
	t.Helper()
	p := &Proc{t: t, bin: bin, args: args}
	for _, o := range opts {
		o(p)
	}
	if p.GRPCAddr == "" {
		p.GRPCAddr, p.HTTPAddr = FreeAddr(t), FreeAddr(t)
	}
	p.LogPath = filepath.Join(t.TempDir(), filepath.Base(bin)+".log")
	p.start()
	t.Cleanup(func() { p.Stop() })
	p.WaitServing(30 * time.Second)
	return p
}

func (p *Proc) start() {
	p.t.Helper()
	logf, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		p.t.Fatal(err)
	}
	args := append([]string{"--grpc-addr", p.GRPCAddr, "--http-addr", p.HTTPAddr}, p.args...)
	p.cmd = exec.Command(p.bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.Env = append(os.Environ(), p.env...)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		p.t.Fatalf("start %s: %v", p.bin, err)
	}
	p.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		p.waitErr = cmd.Wait()
		logf.Close()
		close(done)
	}(p.cmd, p.done)
}

// quickReconnect dials again within 100 ms after a refused connection
// (gRPC's default waits a second, then longer), so that the time a process
// takes to serve is measured, not the client's backoff.
var quickReconnect = grpc.WithConnectParams(grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 2, MaxDelay: 100 * time.Millisecond},
	MinConnectTimeout: time.Second,
})

// Dial returns a plaintext connection to the process that reconnects
// quickly when it restarts; it is closed when the test ends.
func (p *Proc) Dial(t testing.TB) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(p.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()), quickReconnect)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// WaitServing waits until the process's overall health is SERVING.
func (p *Proc) WaitServing(timeout time.Duration) {
	p.t.Helper()
	creds := insecure.NewCredentials()
	if p.health != nil {
		creds = credentials.NewTLS(p.health)
	}
	cc, err := grpc.NewClient(p.GRPCAddr, grpc.WithTransportCredentials(creds), quickReconnect)
	if err != nil {
		p.t.Fatal(err)
	}
	defer cc.Close()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			p.t.Fatalf("%s exited before serving: %v\n%s", filepath.Base(p.bin), p.waitErr, p.Log())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.t.Fatalf("%s not SERVING after %s\n%s", filepath.Base(p.bin), timeout, p.Log())
}

// Pid returns the process id of the running process.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Usage is what a process has used so far.
type Usage struct {
	// CPU is its user and system time (10 ms ticks).
	CPU time.Duration
	// RSS is its resident memory now and Peak its highest, in bytes.
	RSS, Peak float64
}

// Usage reads the running process's CPU time and resident memory from
// /proc.
func (p *Proc) Usage() Usage {
	p.t.Helper()
	var u Usage
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Pid()))
	if err != nil {
		p.t.Fatal(err)
	}
	// The fields after the command name, which may hold spaces.
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+2:]))
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	const ticks = 100 // USER_HZ
	u.CPU = time.Duration((utime + stime) / ticks * float64(time.Second))
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Pid()))
	if err != nil {
		p.t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmRSS:":
			u.RSS = kb * 1024
		case "VmHWM:":
			u.Peak = kb * 1024
		}
	}
	return u
}

// Log returns the process's output so far.
func (p *Proc) Log() string {
	b, _ := os.ReadFile(p.LogPath)
	if len(b) > 8000 {
		b = append([]byte("...\n"), b[len(b)-8000:]...)
	}
	return string(bytes.TrimSpace(b))
}

// Kill sends SIGKILL and waits for the process to exit.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Signal sends sig to the process, for example SIGSTOP and SIGCONT to
// pause it as a long GC pause or a stalled VM would.
func (p *Proc) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Stop sends SIGTERM, waits up to 20 s, then kills.
func (p *Proc) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		p.Kill()
	}
}

// Restart starts the process again with the same arguments and ports after
// it exited (Kill or Stop first), and waits until it serves.
func (p *Proc) Restart() {
	p.t.Helper()
	<-p.done
	p.start()
	p.WaitServing(30 * time.Second)
}

// RestartWith is Restart with args in place of the arguments the process
// was started with (the ports stay), for a service restarted with another
// configuration.
func (p *Proc) RestartWith(args []string) {
	p.t.Helper()
	p.args = args
	p.Restart()
}

// Tool returns the path of a pinned tool installed into .bin by `make
// tools` (for example "grpcurl"). When it is missing the test fails with the
// command that installs it (make test installs it first); only `go test
// -short` skips the test.
func Tool(t testing.TB, name string) string {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(root, ".bin", name)
	if _, err := os.Stat(p); err != nil {
		if testing.Short() {
			t.Skipf("skipping in -short: %s is missing: run make tools", p)
		}
		t.Fatalf("%s is missing: run make tools (or go test -short to skip the tests that need it)", p)
	}
	return p
}

package kubetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// DefaultStartTimeout bounds how long a component may take to become ready.
// Generous because tests share small machines.
const DefaultStartTimeout = 60 * time.Second

// DefaultStopGrace is how long a component gets to exit after SIGTERM before
// it is killed.
const DefaultStopGrace = 10 * time.Second

// EtcdConfig configures LaunchEtcd.
type EtcdConfig struct {
	// Binaries locates the etcd executable.
	Binaries Binaries
	// Dir holds the data folder and etcd.log; it must exist.
	Dir string
	// Fsync makes etcd sync its log to disk. Off by default: tests and the
	// demo lose nothing when only the process dies, and syncing makes
	// every write an order of magnitude slower on shared disks.
	Fsync bool
	// StartTimeout bounds start-up; DefaultStartTimeout when zero.
	StartTimeout time.Duration
	// Args are extra etcd flags, such as "--max-txn-ops=1024".
	Args []string
}

// Etcd is a running single-member etcd on the loopback interface.
type Etcd struct {
	endpoint string
	bin      string
	args     []string
	logPath  string
	timeout  time.Duration
	proc     *process
}

// Endpoint is the client URL, for example http://127.0.0.1:43211.
func (e *Etcd) Endpoint() string { return e.endpoint }

// Endpoints is Endpoint as a list, the form etcd clients take.
func (e *Etcd) Endpoints() []string { return []string{e.endpoint} }

// LogPath is the file that holds etcd's output.
func (e *Etcd) LogPath() string { return e.proc.logPath }

// Exited is closed when the etcd process has exited, for whatever reason.
func (e *Etcd) Exited() <-chan struct{} { return e.proc.done }

// Pid is the etcd process's id, for benchmarks that read its CPU time.
func (e *Etcd) Pid() int { return e.proc.cmd.Process.Pid }

// Stop terminates etcd (SIGTERM, then SIGKILL after DefaultStopGrace) and
// returns once it is gone. Stopping twice is harmless.
func (e *Etcd) Stop() error { return e.proc.stop(DefaultStopGrace) }

// Kill ends etcd with SIGKILL, a crash with no clean shutdown, and returns
// once it is gone. Start brings it back on the same ports and data folder.
// Killing an etcd that has already exited is harmless.
func (e *Etcd) Kill() error { return e.proc.kill() }

// Start starts a stopped etcd again on the same ports and data folder, as
// after a crash or a rolling restart, and waits until it serves. Clients
// keep their endpoint. It fails if another process took a port meanwhile.
func (e *Etcd) Start(ctx context.Context) error {
	select {
	case <-e.proc.done:
	default:
		return errors.New("etcd is still running")
	}
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	proc, err := startProcess("etcd", e.bin, e.args, e.logPath)
	if err != nil {
		return err
	}
	client := &http.Client{Timeout: 2 * time.Second}
	if err := proc.waitReady(ctx, func(ctx context.Context) error { return etcdHealthy(ctx, client, e.endpoint) }); err != nil {
		_ = proc.stop(DefaultStopGrace)
		return fmt.Errorf("restart etcd: %w", err)
	}
	e.proc = proc
	return nil
}

// LaunchEtcd starts etcd on free loopback ports and waits until it serves.
// The caller owns the process and must call Stop.
func LaunchEtcd(ctx context.Context, cfg EtcdConfig) (*Etcd, error) {
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = DefaultStartTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()
	var err error
	for range startAttempts {
		var e *Etcd
		e, err = launchEtcdOnce(ctx, cfg)
		if err == nil {
			return e, nil
		}
		if !errors.Is(err, errAddressInUse) {
			break
		}
	}
	return nil, fmt.Errorf("launch etcd: %w", err)
}

func launchEtcdOnce(ctx context.Context, cfg EtcdConfig) (*Etcd, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	clientURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peerURL := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	dataDir := filepath.Join(cfg.Dir, "data")
	// A previous attempt that lost its port race may have left a member
	// with the old peer URL in the data folder.
	if err := os.RemoveAll(dataDir); err != nil {
		return nil, fmt.Errorf("clear etcd data folder: %w", err)
	}
	args := []string{
		"--name=plexus",
		"--data-dir=" + dataDir,
		"--listen-client-urls=" + clientURL,
		"--advertise-client-urls=" + clientURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=plexus=" + peerURL,
		"--initial-cluster-state=new",
		"--log-level=warn",
	}
	if !cfg.Fsync {
		args = append(args, "--unsafe-no-fsync")
	}
	args = append(args, cfg.Args...)
	logPath := filepath.Join(cfg.Dir, "etcd.log")
	proc, err := startProcess("etcd", cfg.Binaries.Etcd(), args, logPath)
	if err != nil {
		return nil, err
	}
	e := &Etcd{endpoint: clientURL, bin: cfg.Binaries.Etcd(), args: args, logPath: logPath, timeout: cfg.StartTimeout, proc: proc}
	client := &http.Client{Timeout: 2 * time.Second}
	if err := proc.waitReady(ctx, func(ctx context.Context) error { return etcdHealthy(ctx, client, clientURL) }); err != nil {
		_ = proc.stop(DefaultStopGrace)
		return nil, err
	}
	return e, nil
}

func etcdHealthy(ctx context.Context, client *http.Client, endpoint string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return err
	}
	var health struct {
		Health string `json:"health"`
	}
	if err := json.Unmarshal(body, &health); err != nil {
		return fmt.Errorf("decode /health: %w", err)
	}
	if health.Health != "true" {
		return fmt.Errorf("/health says %s", body)
	}
	return nil
}

// StartEtcd starts etcd for the test, with its data in a temporary folder,
// and stops it when the test ends. It skips or fails the test as
// RequireBinaries does when the binaries are missing. args are extra etcd
// flags.
func StartEtcd(t testing.TB, args ...string) *Etcd {
	t.Helper()
	bins := RequireBinaries(t)
	dir := t.TempDir()
	e, err := LaunchEtcd(context.Background(), EtcdConfig{Binaries: bins, Dir: dir, Args: args})
	if err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	// Registered after TempDir, so it runs before the folder is removed.
	t.Cleanup(func() {
		if err := e.Stop(); err != nil {
			t.Errorf("stop etcd: %v", err)
		}
	})
	return e
}

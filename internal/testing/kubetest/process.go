package kubetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// errAddressInUse marks a start that lost the race for its port to another
// process; the caller picks new ports and tries again.
var errAddressInUse = errors.New("address already in use")

// startAttempts bounds the retries after losing a port race.
const startAttempts = 3

// process is one child (etcd or kube-apiserver) with its output in a log file.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	waitErr error // set before done is closed
}

func startProcess(name, bin string, args []string, logPath string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s log: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = childAttrs()
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		_ = logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// exitError describes an early exit, with the end of the log, and tells a
// port race apart from other failures.
func (p *process) exitError() error {
	tail := p.logTail(40)
	err := fmt.Errorf("%s exited during start-up (%v); end of %s:\n%s", p.name, p.waitErr, p.logPath, tail)
	if strings.Contains(tail, "address already in use") {
		return fmt.Errorf("%w: %w", errAddressInUse, err)
	}
	return err
}

func (p *process) logTail(lines int) string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(log unreadable: %v)", err)
	}
	data = bytes.TrimRight(data, "\n")
	all := strings.Split(string(data), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// waitReady polls ready until it returns nil, the process exits, or ctx ends.
func (p *process) waitReady(ctx context.Context, ready func(context.Context) error) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		if last = ready(ctx); last == nil {
			return nil
		}
		select {
		case <-p.done:
			return p.exitError()
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w (last check: %v); end of %s:\n%s",
				p.name, ctx.Err(), last, p.logPath, p.logTail(20))
		case <-tick.C:
		}
	}
}

// stop asks the process to exit with SIGTERM and kills it if it is still
// running after grace. It returns once the process is gone.
func (p *process) stop(grace time.Duration) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal %s: %w", p.name, err)
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-p.done:
		return nil
	case <-timer.C:
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill %s: %w", p.name, err)
	}
	<-p.done
	return fmt.Errorf("%s did not exit within %s of SIGTERM and was killed", p.name, grace)
}

// kill ends the process with SIGKILL at once, as a crash or the OOM killer
// would, and returns once it is gone. Killing a process that has already
// exited is harmless.
func (p *process) kill() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill %s: %w", p.name, err)
	}
	<-p.done
	return nil
}

// freePorts returns n distinct loopback ports that were free a moment ago.
// Another process may take one before the child binds it; the child then
// fails with errAddressInUse and the caller retries.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	listeners := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Process is a long-running child started for a test cluster (a data plane
// component: kube-proxy, CoreDNS), its output in a log file; the kernel
// kills it when the starting process dies.
type Process struct{ p *process }

// StartProcess runs bin with args, its output appended to logPath.
func StartProcess(name, bin string, args []string, logPath string) (*Process, error) {
	p, err := startProcess(name, bin, args, logPath)
	if err != nil {
		return nil, err
	}
	return &Process{p: p}, nil
}

// Stop terminates it (SIGTERM, SIGKILL after DefaultStopGrace) and returns
// once it is gone.
func (p *Process) Stop() error { return p.p.stop(DefaultStopGrace) }

// Exited is closed when the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.p.done }

// LogPath is the file its output goes to.
func (p *Process) LogPath() string { return p.p.logPath }

// WaitReady polls ready until it returns nil, the process exits (an error
// with the end of its log), or ctx ends.
func (p *Process) WaitReady(ctx context.Context, ready func(context.Context) error) error {
	return p.p.waitReady(ctx, ready)
}

package dataplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"
)

// ExecInContainer runs cmd in the Pod's network namespace, with the Pod's
// resolv.conf and the container's environment, as the kubelet's exec does
// in the container. podName is namespace/name. It implements
// remotecommand.Executor.
func (r *Runtime) ExecInContainer(ctx context.Context, podName, _ string, container string, cmd []string, in io.Reader, out, errw io.WriteCloser,
	tty bool, resize <-chan remotecommand.TerminalSize, _ time.Duration) error {
	sb, c, err := r.lookup(podName, container)
	if err != nil {
		return err
	}
	if len(cmd) == 0 {
		return errors.New("no command to run")
	}
	r.mu.Lock()
	env := c.env
	r.mu.Unlock()
	proc := inNetns(sb.netns, cmd, env, c.dir)
	if tty {
		return runTTY(ctx, proc, in, out, resize)
	}
	proc.Stdout, proc.Stderr = out, errw
	var stdin io.WriteCloser
	if in != nil {
		// Not proc.Stdin: Wait would wait for the client's stream to end.
		if stdin, err = proc.StdinPipe(); err != nil {
			return err
		}
	}
	if err := proc.Start(); err != nil {
		return err
	}
	if stdin != nil {
		go func() { _, _ = io.Copy(stdin, in); _ = stdin.Close() }()
	}
	return waitExec(ctx, proc)
}

// waitExec waits for proc, killing its process group when ctx ends (the
// client went away), and turns its exit status into the error the
// streaming server reports as the exit code.
func waitExec(ctx context.Context, proc *exec.Cmd) error {
	done := make(chan error, 1)
	go func() { done <- proc.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = killGroup(proc)
		err = <-done
	}
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		code := exitErr.ExitCode()
		if code < 0 {
			code = 137
		}
		return utilexec.CodeExitError{Err: err, Code: code}
	}
	return err
}

func killGroup(cmd *exec.Cmd) error {
	if cmd.Process == nil {
		return nil
	}
	return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
}

// runTTY runs proc on a new pseudo-terminal: its output (stdout and stderr
// alike, as on a terminal) goes to out, in is its keyboard, and resize
// events size the terminal.
func runTTY(ctx context.Context, proc *exec.Cmd, in io.Reader, out io.Writer, resize <-chan remotecommand.TerminalSize) error {
	ptmx, pts, err := openPTY()
	if err != nil {
		return err
	}
	defer ptmx.Close()
	proc.Stdin, proc.Stdout, proc.Stderr = pts, pts, pts
	// A session of its own with the terminal as its controlling one, as
	// a shell expects; the session leader's group is the one killGroup
	// stops.
	proc.SysProcAttr.Setpgid = false
	proc.SysProcAttr.Setsid, proc.SysProcAttr.Setctty, proc.SysProcAttr.Ctty = true, true, 0
	startErr := proc.Start()
	_ = pts.Close()
	if startErr != nil {
		return startErr
	}
	copied := make(chan struct{})
	go func() {
		_, _ = io.Copy(out, ptmx) // ends with EIO once the terminal's last holder exits
		close(copied)
	}()
	if in != nil {
		go func() { _, _ = io.Copy(ptmx, in) }()
	}
	stopResize := make(chan struct{})
	defer close(stopResize)
	go func() {
		for {
			select {
			case size, ok := <-resize:
				if !ok {
					return
				}
				_ = unix.IoctlSetWinsize(int(ptmx.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: size.Height, Col: size.Width})
			case <-stopResize:
				return
			}
		}
	}()
	err = waitExec(ctx, proc)
	select {
	case <-copied:
	case <-time.After(time.Second): // a background child still holds the terminal
	}
	return err
}

// openPTY opens a new pseudo-terminal pair: the controlling side and the
// terminal a process is given.
func openPTY() (ptmx, pts *os.File, err error) {
	ptmx, err = os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open a terminal: %w", err)
	}
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		_ = ptmx.Close()
		return nil, nil, fmt.Errorf("unlock the terminal: %w", err)
	}
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		_ = ptmx.Close()
		return nil, nil, fmt.Errorf("name the terminal: %w", err)
	}
	pts, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = ptmx.Close()
		return nil, nil, fmt.Errorf("open the terminal: %w", err)
	}
	return ptmx, pts, nil
}

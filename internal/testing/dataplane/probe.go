package dataplane

import (
	"context"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// probe runs c's readiness probe (exec, or tcpSocket to the Pod's address)
// in the Pod's namespace until the returned function is called, and
// resyncs the Pod when its readiness flips. r.mu is held.
func (r *Runtime) probe(sb *sandbox, c *container) (stop func()) {
	p := c.probe
	period := time.Duration(max(p.PeriodSeconds, 1)) * time.Second
	timeout := time.Duration(max(p.TimeoutSeconds, 1)) * time.Second
	successes, failures := max(p.SuccessThreshold, 1), max(p.FailureThreshold, 1)
	argv, env := probeArgv(p, sb.ip.String(), timeout), c.env
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(p.InitialDelaySeconds) * time.Second):
		}
		tick := time.NewTicker(period)
		defer tick.Stop()
		var ok, bad int32
		for {
			pass := argv != nil && runProbe(ctx, sb.netns, argv, env, timeout)
			if pass {
				ok, bad = ok+1, 0
			} else {
				ok, bad = 0, bad+1
			}
			r.mu.Lock()
			changed := false
			if ctx.Err() == nil && !c.ready && ok >= successes {
				c.ready, changed = true, true
			} else if ctx.Err() == nil && c.ready && bad >= failures {
				c.ready, changed = false, true
			}
			r.mu.Unlock()
			if changed {
				r.cfg.Resync(sb.key)
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return cancel
}

// probeArgv is the command a probe runs in the Pod's namespace; nil for a
// kind of probe not supported here (httpGet, grpc), which never passes.
func probeArgv(p *corev1.Probe, podIP string, timeout time.Duration) []string {
	switch {
	case p.Exec != nil:
		return p.Exec.Command
	case p.TCPSocket != nil:
		host := p.TCPSocket.Host
		if host == "" {
			host = podIP
		}
		return []string{"nc", "-z", "-w", strconv.Itoa(int(timeout / time.Second)), host, p.TCPSocket.Port.String()}
	}
	return nil
}

func runProbe(ctx context.Context, netns string, argv, env []string, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := inNetns(netns, argv, env, "")
	if err := cmd.Start(); err != nil {
		return false
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err == nil
	case <-ctx.Done():
		_ = killGroup(cmd)
		<-done
		return false
	}
}

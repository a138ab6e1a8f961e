package dataplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/plexusnet/plexus/internal/testing/kubetest"
)

// defaultPath is the PATH a container gets when its spec sets none, as
// container images commonly do.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// stopGrace is how long a container has between SIGTERM and SIGKILL when
// localkube itself stops.
const stopGrace = 2 * time.Second

// RuntimeConfig configures a Runtime.
type RuntimeConfig struct {
	// Node is the node the Pods run on.
	Node *Node
	// DNS is the cluster DNS Service's address, the Pods' name server.
	DNS netip.Addr
	// ClusterDomain is the cluster's DNS domain (cluster.local).
	ClusterDomain string
	// KubeletPort is the port of the kubelet API on the host's loopback
	// (Serve listens on it).
	KubeletPort int32
	// Resync is told namespace/name of a Pod whose containers changed.
	Resync func(key string)
	// Log receives the runtime's events.
	Log *slog.Logger
}

// Runtime runs Pods on one node: a network namespace per Pod, its
// container commands as processes in it. It implements kubetest.PodRuntime.
type Runtime struct {
	cfg  RuntimeConfig
	logs string

	mu   sync.Mutex
	pods map[types.UID]*sandbox
}

// sandbox is one Pod's namespace and containers.
type sandbox struct {
	key, netns string
	uid        types.UID
	ip         netip.Addr
	containers []*container
	stopped    bool
}

// container is one container's process; its fields are guarded by the
// Runtime's mutex.
type container struct {
	name    string
	argv    []string
	env     []string
	dir     string
	logPath string
	policy  corev1.RestartPolicy
	probe   *corev1.Probe
	preStop *corev1.LifecycleHandler

	cmd               *exec.Cmd
	running, ready    bool
	restarts          int32
	started, finished time.Time
	exitCode          int32
	waiting, message  string
	stopProbe         func()
}

// NewRuntime returns a runtime for cfg.Node; Pod logs go below the plane's
// folder.
func NewRuntime(cfg RuntimeConfig) *Runtime {
	if cfg.ClusterDomain == "" {
		cfg.ClusterDomain = "cluster.local"
	}
	if cfg.Resync == nil {
		cfg.Resync = func(string) {}
	}
	return &Runtime{cfg: cfg, logs: filepath.Join(cfg.Node.plane.dir, "pods", cfg.Node.Cluster), pods: map[types.UID]*sandbox{}}
}

// Node implements kubetest.PodRuntime.
func (r *Runtime) Node() kubetest.RuntimeNode {
	return kubetest.RuntimeNode{InternalIP: r.cfg.Node.IP.String(), KubeletAddress: "127.0.0.1", KubeletPort: r.cfg.KubeletPort,
		Zone: "localkube-" + r.cfg.Node.Cluster}
}

// Sync implements kubetest.PodRuntime: the first call makes the Pod's
// namespace and starts its containers.
func (r *Runtime) Sync(_ context.Context, pod *corev1.Pod) (kubetest.PodState, error) {
	r.mu.Lock()
	sb := r.pods[pod.UID]
	r.mu.Unlock()
	if sb == nil {
		var err error
		if sb, err = r.create(pod); err != nil {
			return kubetest.PodState{}, err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	st := kubetest.PodState{IPs: []string{sb.ip.String()}}
	for _, c := range sb.containers {
		st.Containers = append(st.Containers, kubetest.ContainerState{Name: c.name, Running: c.running, Ready: c.running && c.ready,
			Restarts: c.restarts, StartedAt: c.started, FinishedAt: c.finished, ExitCode: c.exitCode, Waiting: c.waiting, Message: c.message})
	}
	return st, nil
}

// create makes the Pod's namespace, its resolv.conf and hosts, and starts
// its containers.
func (r *Runtime) create(pod *corev1.Pod) (*sandbox, error) {
	sb := &sandbox{key: pod.Namespace + "/" + pod.Name, uid: pod.UID,
		netns: r.cfg.Node.plane.prefix + "p" + strings.ReplaceAll(string(pod.UID), "-", "")[:16]}
	ip, err := r.cfg.Node.addPodNetwork(string(pod.UID), sb.netns)
	if err != nil {
		return nil, errors.Join(err, deleteNetns(sb.netns))
	}
	sb.ip = ip
	if err := r.writeEtc(pod, sb); err != nil {
		return nil, errors.Join(err, r.cfg.Node.removePodNetwork(string(pod.UID), sb.netns))
	}
	if err := os.MkdirAll(r.logs, 0o755); err != nil {
		return nil, errors.Join(err, r.cfg.Node.removePodNetwork(string(pod.UID), sb.netns))
	}
	hostIP := r.cfg.Node.IP.String()
	for _, spec := range pod.Spec.Containers {
		c := &container{name: spec.Name, dir: spec.WorkingDir, policy: pod.Spec.RestartPolicy, probe: spec.ReadinessProbe,
			logPath: filepath.Join(r.logs, fmt.Sprintf("%s_%s_%s_%s.log", pod.Namespace, pod.Name, pod.UID, spec.Name))}
		if spec.Lifecycle != nil {
			c.preStop = spec.Lifecycle.PreStop
		}
		env, err := containerEnv(pod, spec, ip.String(), hostIP)
		if err == nil {
			c.env = env
			c.argv, err = containerArgv(spec, env)
		}
		if err != nil {
			c.waiting, c.message = "CreateContainerConfigError", err.Error()
		}
		sb.containers = append(sb.containers, c)
	}
	r.mu.Lock()
	r.pods[pod.UID] = sb
	for _, c := range sb.containers {
		if c.waiting == "" {
			r.start(sb, c)
		}
	}
	r.mu.Unlock()
	r.cfg.Log.Debug("pod started", "pod", sb.key, "ip", ip, "netns", sb.netns)
	return sb, nil
}

// writeEtc writes what ip netns exec lays over /etc for the Pod's
// processes: the cluster DNS as name server with the Pod's search path,
// and its own name in hosts.
func (r *Runtime) writeEtc(pod *corev1.Pod, sb *sandbox) error {
	dir := filepath.Join("/etc/netns", sb.netns)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	d := r.cfg.ClusterDomain
	resolv := fmt.Sprintf("nameserver %s\nsearch %s.svc.%s svc.%s %s\noptions ndots:5\n", r.cfg.DNS, pod.Namespace, d, d, d)
	hostname := pod.Name
	if pod.Spec.Hostname != "" {
		hostname = pod.Spec.Hostname
	}
	hosts := fmt.Sprintf("127.0.0.1\tlocalhost\n::1\tlocalhost\n%s\t%s\n", sb.ip, hostname)
	if err := os.WriteFile(filepath.Join(dir, "resolv.conf"), []byte(resolv), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "hosts"), []byte(hosts), 0o644)
}

// start runs c's process in the Pod's namespace. r.mu is held.
func (r *Runtime) start(sb *sandbox, c *container) {
	logFile, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.waiting, c.message = "RunContainerError", err.Error()
		return
	}
	cmd := inNetns(sb.netns, c.argv, c.env, c.dir)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		c.waiting, c.message = "RunContainerError", err.Error()
		return
	}
	c.cmd, c.running, c.started, c.waiting, c.message = cmd, true, time.Now(), "", ""
	c.ready = c.probe == nil
	if c.probe != nil {
		c.stopProbe = r.probe(sb, c)
	}
	go r.wait(sb, c, cmd, logFile)
}

// inNetns is a command that runs argv in the named namespace, in a process
// group of its own (so what it forks is stopped with it).
func inNetns(netns string, argv, env []string, dir string) *exec.Cmd {
	cmd := exec.Command("ip", append([]string{"netns", "exec", netns}, argv...)...)
	cmd.Env = env
	cmd.Dir = dir
	if cmd.Dir == "" {
		cmd.Dir = "/"
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return cmd
}

// wait records how c's process ended and restarts it as its Pod's restart
// policy says.
func (r *Runtime) wait(sb *sandbox, c *container, cmd *exec.Cmd, logFile *os.File) {
	err := cmd.Wait()
	_ = logFile.Close()
	r.mu.Lock()
	c.running, c.ready, c.finished = false, false, time.Now()
	if c.stopProbe != nil {
		c.stopProbe()
		c.stopProbe = nil
	}
	c.exitCode = 0
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		c.exitCode = int32(exitErr.ExitCode())
		if c.exitCode < 0 {
			c.exitCode = 137 // killed by a signal
		}
	}
	restart := !sb.stopped && (c.policy == corev1.RestartPolicyAlways || c.policy == "" ||
		(c.policy == corev1.RestartPolicyOnFailure && c.exitCode != 0))
	if restart {
		c.waiting = "CrashLoopBackOff"
		backoff := min(10*time.Second, time.Second<<min(c.restarts, 4))
		time.AfterFunc(backoff, func() {
			r.mu.Lock()
			if !sb.stopped && !c.running {
				c.restarts++
				r.start(sb, c)
			}
			r.mu.Unlock()
			r.cfg.Resync(sb.key)
		})
	}
	r.mu.Unlock()
	r.cfg.Log.Debug("container exited", "pod", sb.key, "container", c.name, "exitCode", c.exitCode, "restart", restart)
	r.cfg.Resync(sb.key)
}

// Remove implements kubetest.PodRuntime, as a kubelet stops a Pod: each
// running container's preStop hook (exec or sleep), then SIGTERM to its
// process group, SIGKILL for what still runs when grace is over; then the
// namespace goes.
func (r *Runtime) Remove(uid types.UID, grace time.Duration) error {
	r.mu.Lock()
	sb := r.pods[uid]
	if sb == nil {
		r.mu.Unlock()
		return nil
	}
	sb.stopped = true
	var running []*container
	for _, c := range sb.containers {
		if c.running {
			running = append(running, c)
		}
	}
	r.mu.Unlock()
	deadline := time.Now().Add(grace)
	var hooks sync.WaitGroup
	for _, c := range running {
		if c.preStop != nil {
			hooks.Go(func() { r.runPreStop(sb, c, deadline) })
		}
	}
	hooks.Wait()
	for _, c := range running {
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGTERM)
	}
	for _, c := range running {
		for time.Now().Before(deadline) && syscall.Kill(c.cmd.Process.Pid, 0) == nil {
			time.Sleep(20 * time.Millisecond)
		}
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
	}
	if err := r.cfg.Node.removePodNetwork(string(uid), sb.netns); err != nil {
		return err
	}
	r.mu.Lock()
	delete(r.pods, uid)
	r.mu.Unlock()
	r.cfg.Log.Debug("pod removed", "pod", sb.key)
	return nil
}

// runPreStop runs c's preStop hook, at most until deadline.
func (r *Runtime) runPreStop(sb *sandbox, c *container, deadline time.Time) {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	switch h := c.preStop; {
	case h.Sleep != nil:
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(h.Sleep.Seconds) * time.Second):
		}
	case h.Exec != nil:
		r.mu.Lock()
		env := c.env
		r.mu.Unlock()
		cmd := inNetns(sb.netns, h.Exec.Command, env, c.dir)
		if err := cmd.Start(); err == nil {
			_ = waitExec(ctx, cmd)
		}
	}
}

// Close removes every Pod still running.
func (r *Runtime) Close() error {
	r.mu.Lock()
	var uids []types.UID
	for uid := range r.pods {
		uids = append(uids, uid)
	}
	r.mu.Unlock()
	var errs []error
	for _, uid := range uids {
		errs = append(errs, r.Remove(uid, stopGrace))
	}
	return errors.Join(errs...)
}

// lookup returns the Pod namespace/name and its container, running.
func (r *Runtime) lookup(key, name string) (*sandbox, *container, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, sb := range r.pods {
		if sb.key != key || sb.stopped {
			continue
		}
		for _, c := range sb.containers {
			if c.name == name || name == "" {
				if !c.running {
					return nil, nil, fmt.Errorf("container %s of pod %s is not running", c.name, key)
				}
				return sb, c, nil
			}
		}
		return nil, nil, fmt.Errorf("pod %s has no container %s", key, name)
	}
	return nil, nil, fmt.Errorf("pod %s is not running on this node", key)
}

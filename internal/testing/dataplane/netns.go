package dataplane

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// CNIDir is where Debian's containernetworking-plugins installs the plugins.
const CNIDir = "/usr/lib/cni"

// NodeRange holds the nodes' addresses on the fabric: 10.160.0.<N+1> is
// cluster N's node. It lies outside every Service range (10.96.0.0/11) and
// Pod range (10.128.0.0/11) localkube hands out.
var NodeRange = netip.MustParsePrefix("10.160.0.0/24")

// noGateway is the nodes' default gateway: an address of the fabric no
// namespace holds.
var noGateway = netip.MustParseAddr("10.160.0.254")

// ErrUnavailable means this machine cannot make the data plane (not root,
// or a tool is missing); the message says which.
var ErrUnavailable = errors.New("data plane unavailable")

// Check reports whether this process can make a data plane: root, ip,
// nft, and the ptp and host-local CNI plugins.
func Check() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: network namespaces need root", ErrUnavailable)
	}
	var missing []string
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	for _, plugin := range []string{"ptp", "host-local"} {
		if _, err := os.Stat(filepath.Join(CNIDir, plugin)); err != nil {
			missing = append(missing, filepath.Join(CNIDir, plugin))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: missing %s (Debian: iproute2 nftables containernetworking-plugins)", ErrUnavailable, strings.Join(missing, ", "))
	}
	return nil
}

// Plane is one localkube run's network: the fabric and the nodes on it.
type Plane struct {
	prefix string
	fabric string
	dir    string
	log    *slog.Logger

	mu    sync.Mutex
	nodes []*Node
}

// New makes the fabric namespace and its bridge. dir receives the CNI
// plugins' address files and the pods' logs. Namespaces left behind by
// runs whose process is gone are removed first.
func New(dir string, log *slog.Logger) (*Plane, error) {
	if err := Check(); err != nil {
		return nil, err
	}
	removeStale(log)
	p := &Plane{prefix: fmt.Sprintf("plx%d-", os.Getpid()), dir: dir, log: log}
	p.fabric = p.prefix + "fabric"
	if err := addNetns(p.fabric); err != nil {
		return nil, err
	}
	if err := ipIn(p.fabric, "link", "add", "br0", "type", "bridge"); err != nil {
		return nil, errors.Join(err, p.Close())
	}
	if err := ipIn(p.fabric, "link", "set", "br0", "up"); err != nil {
		return nil, errors.Join(err, p.Close())
	}
	return p, nil
}

// Node is one cluster's node: a network namespace on the fabric.
type Node struct {
	// Cluster names the cluster the node belongs to.
	Cluster string
	// NetNS is the name of its network namespace (ip netns).
	NetNS string
	// IP is its address on the fabric, the Node's InternalIP.
	IP netip.Addr
	// PodCIDR is the range its Pods' addresses come from.
	PodCIDR netip.Prefix

	plane *Plane
}

// AddNode makes the node namespace of the index-th cluster and wires it
// to the fabric; its Pods get addresses of podCIDR.
func (p *Plane) AddNode(cluster string, index int, podCIDR netip.Prefix) (*Node, error) {
	if index < 0 || index > 250 {
		return nil, fmt.Errorf("node index %d out of range", index)
	}
	ip := NodeRange.Addr()
	for range index + 1 {
		ip = ip.Next()
	}
	n := &Node{Cluster: cluster, NetNS: p.prefix + cluster, IP: ip, PodCIDR: podCIDR, plane: p}
	if err := addNetns(n.NetNS); err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.nodes = append(p.nodes, n)
	p.mu.Unlock()
	port := "n" + strconv.Itoa(index)
	steps := [][]string{
		{"-n", n.NetNS, "link", "set", "lo", "up"},
		{"-n", p.fabric, "link", "add", port, "type", "veth", "peer", "name", "fab0", "netns", n.NetNS},
		{"-n", p.fabric, "link", "set", port, "master", "br0", "up"},
		{"-n", n.NetNS, "addr", "add", netip.PrefixFrom(ip, NodeRange.Bits()).String(), "dev", "fab0"},
		{"-n", n.NetNS, "link", "set", "fab0", "up"},
		// A default route, as every real node has, to a gateway on the
		// fabric that nobody answers for: a packet to an address no rule
		// rewrote (a ClusterIP with no endpoints) is routed, so it reaches
		// kube-proxy's filter chains, which reject it, rather than failing
		// the route lookup first ("network unreachable").
		{"-n", n.NetNS, "route", "add", "default", "via", noGateway.String(), "dev", "fab0"},
	}
	for _, args := range steps {
		if err := run("ip", args...); err != nil {
			return nil, fmt.Errorf("node %s: %w", cluster, err)
		}
	}
	// The node routes between its Pods and the fabric, as a Linux node does.
	if err := run("ip", "netns", "exec", n.NetNS, "sysctl", "-qw", "net.ipv4.ip_forward=1"); err != nil {
		return nil, fmt.Errorf("node %s: %w", cluster, err)
	}
	return n, nil
}

// Connect gives every node a route to every other node's Pod range.
func (p *Plane) Connect() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, n := range p.nodes {
		for _, other := range p.nodes {
			if other == n {
				continue
			}
			if err := ipIn(n.NetNS, "route", "replace", other.PodCIDR.String(), "via", other.IP.String()); err != nil {
				return fmt.Errorf("route from %s to %s: %w", n.Cluster, other.Cluster, err)
			}
		}
	}
	return nil
}

// Close removes the nodes' and the fabric's namespaces, with every
// process still in them. Pods' namespaces are the Runtime's to remove.
func (p *Plane) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for _, n := range p.nodes {
		errs = append(errs, deleteNetns(n.NetNS))
	}
	p.nodes = nil
	errs = append(errs, deleteNetns(p.fabric))
	return errors.Join(errs...)
}

// nsPath is where ip netns keeps a named namespace.
func nsPath(name string) string { return filepath.Join("/run/netns", name) }

func addNetns(name string) error {
	if err := run("ip", "netns", "add", name); err != nil {
		return err
	}
	return run("ip", "-n", name, "link", "set", "lo", "up")
}

// deleteNetns kills what still runs in the namespace and removes it, with
// the files ip netns exec lays over /etc for it.
func deleteNetns(name string) error {
	if _, err := os.Stat(nsPath(name)); errors.Is(err, os.ErrNotExist) {
		return os.RemoveAll(filepath.Join("/etc/netns", name))
	}
	if out, err := exec.Command("ip", "netns", "pids", name).Output(); err == nil {
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	err := run("ip", "netns", "delete", name)
	return errors.Join(err, os.RemoveAll(filepath.Join("/etc/netns", name)))
}

var ourNetns = regexp.MustCompile(`^plx(\d+)-`)

// removeStale deletes the namespaces of runs whose process is gone (one
// that was killed had no chance to).
func removeStale(log *slog.Logger) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		m := ourNetns.FindStringSubmatch(fields[0])
		if m == nil {
			continue
		}
		pid, _ := strconv.Atoi(m[1])
		if pid == os.Getpid() || syscall.Kill(pid, 0) == nil {
			continue // still in use
		}
		log.Info("removing a network namespace left by an earlier run", "netns", fields[0])
		if err := deleteNetns(fields[0]); err != nil {
			log.Warn("could not remove a stale network namespace", "netns", fields[0], "error", err)
		}
	}
}

func ipIn(netns string, args ...string) error {
	return run("ip", append([]string{"-n", netns}, args...)...)
}

// run runs a short command and returns its output in the error.
func run(name string, args ...string) error {
	var out bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}

package dataplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"

	"github.com/plexusnet/plexus/internal/testing/kubetest"
)

// ClusterNet is what the data plane needs of one cluster.
type ClusterNet struct {
	Cluster *kubetest.Cluster
	// Node names the cluster's one Node.
	Node string
	// PodCIDR is the cluster's Pod range.
	PodCIDR netip.Prefix
	// ServiceCIDR is the cluster's Service range (kube-dns takes its
	// tenth address).
	ServiceCIDR netip.Prefix
	// Dir receives the logs of its kube-proxy and CoreDNS.
	Dir string
}

// Ready says why the data plane cannot run here, or nil: root, the
// network tools, kube-proxy and CoreDNS. It returns CoreDNS's path.
func Ready(bins kubetest.Binaries) (coredns string, err error) {
	if err := Check(); err != nil {
		return "", err
	}
	if !bins.HasKubeProxy() {
		return "", fmt.Errorf("%w: no kube-proxy in %s (make kube-binaries)", ErrUnavailable, bins.Dir)
	}
	coredns, err = kubetest.FindCoreDNS()
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return coredns, nil
}

// Fleet is a running data plane: what Stop must end, in order.
type Fleet struct {
	cancel   context.CancelFunc
	net      *Plane
	runtimes []*Runtime
	procs    []*kubetest.Process
	relays   []func()
	runners  chan error
	nRunners int
}

// Start gives every cluster a node namespace on one fabric, with a relay
// to its API server, kube-proxy, CoreDNS behind kube-dns, and a pod runner
// whose runtime runs each Pod in a namespace of its own. dir receives the
// CNI plugins' state and the Pods' logs. Stop undoes it.
func Start(ctx context.Context, bins kubetest.Binaries, coredns, dir string, clusters []ClusterNet, log *slog.Logger) (p *Fleet, err error) {
	ctx, cancel := context.WithCancel(ctx)
	p = &Fleet{cancel: cancel, runners: make(chan error, len(clusters))}
	if p.net, err = New(dir, log); err != nil {
		cancel()
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, p.Stop())
			p = nil
		}
	}()
	nodes := make([]*Node, len(clusters))
	for i, c := range clusters {
		if nodes[i], err = p.net.AddNode(c.Cluster.Name, i, c.PodCIDR); err != nil {
			return p, err
		}
	}
	if err := p.net.Connect(); err != nil {
		return p, err
	}
	for i, c := range clusters {
		if err := p.startNode(ctx, bins, coredns, c, nodes[i], log.With("cluster", c.Cluster.Name)); err != nil {
			return p, err
		}
	}
	return p, nil
}

func (p *Fleet) startNode(ctx context.Context, bins kubetest.Binaries, coredns string, cn ClusterNet, node *Node, log *slog.Logger) error {
	c := cn.Cluster
	server, err := url.Parse(c.Config.Host)
	if err != nil {
		return err
	}
	stopRelay, err := node.Relay(server.Host)
	if err != nil {
		return err
	}
	p.relays = append(p.relays, stopRelay)
	dns := KubeDNSAddress(cn.ServiceCIDR)
	if err := node.EnsureKubeDNS(ctx, c.Clientset, dns); err != nil {
		return fmt.Errorf("cluster %s: %w", c.Name, err)
	}
	tlsConfig, err := c.KubeletTLS()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("kubelet API of %s: %w", c.Name, err)
	}
	runner := kubetest.NewPodRunner(c.Clientset, cn.Node, cn.PodCIDR, log)
	rt := NewRuntime(RuntimeConfig{Node: node, DNS: dns, KubeletPort: int32(ln.Addr().(*net.TCPAddr).Port), Resync: runner.Resync, Log: log})
	runner.UseRuntime(rt)
	p.runtimes = append(p.runtimes, rt)
	go func() {
		if err := rt.Serve(ctx, ln, tlsConfig); err != nil {
			log.Error("kubelet API stopped", "error", err)
		}
	}()
	p.nRunners++
	go func() { p.runners <- runner.Run(ctx) }()
	proxy, err := node.StartKubeProxy(bins.KubeProxy(), c.Kubeconfig, cn.Node, cn.Dir)
	if err != nil {
		return err
	}
	p.procs = append(p.procs, proxy)
	dnsProc, err := node.StartCoreDNS(coredns, c.Kubeconfig, c.Name, cn.Dir)
	if err != nil {
		return err
	}
	p.procs = append(p.procs, dnsProc)
	if err := node.WaitDNS(ctx, dnsProc); err != nil {
		return fmt.Errorf("cluster %s: CoreDNS: %w", c.Name, err)
	}
	log.Info("data plane ready", "node", node.IP, "podCIDR", node.PodCIDR, "dns", dns, "netns", node.NetNS)
	return nil
}

// Processes are the node components (kube-proxy, CoreDNS), for a caller
// that watches them exit.
func (p *Fleet) Processes() []*kubetest.Process { return p.procs }

// Stop ends the components and the pod runners, removes every Pod's
// namespace, then the nodes and the fabric.
func (p *Fleet) Stop() error {
	p.cancel()
	var errs []error
	for _, proc := range p.procs {
		errs = append(errs, proc.Stop())
	}
	for _, stop := range p.relays {
		stop()
	}
	for range p.nRunners {
		if err := <-p.runners; err != nil && !errors.Is(err, context.Canceled) {
			errs = append(errs, err)
		}
	}
	for _, rt := range p.runtimes {
		errs = append(errs, rt.Close())
	}
	return errors.Join(append(errs, p.net.Close())...)
}

package dataplane

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/plexusnet/plexus/internal/testing/kubetest"
)

// StartKubeProxy runs kube-proxy (nftables mode) in the node's namespace
// for the Node named nodeName, reading the cluster through kubeconfig
// (whose server the node reaches through Relay). Its log goes to dir.
func (n *Node) StartKubeProxy(bin, kubeconfig, nodeName, dir string) (*kubetest.Process, error) {
	args := []string{"netns", "exec", n.NetNS, bin,
		"--kubeconfig=" + kubeconfig,
		"--hostname-override=" + nodeName,
		"--proxy-mode=nftables",
		// Traffic from the cluster's own Pods is not masqueraded: the
		// endpoint sees the client's address, across clusters too.
		"--cluster-cidr=" + n.PodCIDR.String(),
		// The namespace's conntrack limits stay as the kernel made them
		// (the table size is the host's, not a namespace's, to set).
		"--conntrack-max-per-core=0",
		"--conntrack-tcp-timeout-established=0",
		"--conntrack-tcp-timeout-close-wait=0",
		"--metrics-bind-address=" + net.JoinHostPort(n.IP.String(), "10249"),
		"--healthz-bind-address=" + net.JoinHostPort(n.IP.String(), "10256"),
	}
	return kubetest.StartProcess("kube-proxy "+n.Cluster, "ip", args, filepath.Join(dir, "kube-proxy.log"))
}

// StartCoreDNS runs CoreDNS in the node's namespace on port 53: the
// kubernetes plugin answers cluster.local and, from ServiceImports and
// their EndpointSlices, clusterset.local (its multicluster option).
func (n *Node) StartCoreDNS(bin, kubeconfig, context, dir string) (*kubetest.Process, error) {
	corefile := fmt.Sprintf(`.:53 {
    errors
    kubernetes cluster.local clusterset.local in-addr.arpa ip6.arpa {
        kubeconfig %s %s
        multicluster clusterset.local
    }
}
`, kubeconfig, context)
	path := filepath.Join(dir, "Corefile")
	if err := os.WriteFile(path, []byte(corefile), 0o600); err != nil {
		return nil, err
	}
	return kubetest.StartProcess("coredns "+n.Cluster, "ip", []string{"netns", "exec", n.NetNS, bin, "-conf", path, "-dns.port", "53"},
		filepath.Join(dir, "coredns.log"))
}

// KubeDNSAddress is the cluster DNS Service's address in a Service range:
// the tenth, as kubeadm chooses.
func KubeDNSAddress(serviceCIDR netip.Prefix) netip.Addr {
	a := serviceCIDR.Masked().Addr()
	for range 10 {
		a = a.Next()
	}
	return a
}

// EnsureKubeDNS makes the kube-system/kube-dns Service at address dns with
// an EndpointSlice naming CoreDNS on the node, so kube-proxy forwards the
// Pods' queries to it.
func (n *Node) EnsureKubeDNS(ctx context.Context, client kubernetes.Interface, dns netip.Addr) error {
	ports := []corev1.ServicePort{
		{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(53)},
		{Name: "dns-tcp", Protocol: corev1.ProtocolTCP, Port: 53, TargetPort: intstr.FromInt32(53)},
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: metav1.NamespaceSystem, Labels: map[string]string{"k8s-app": "kube-dns"}},
		Spec:       corev1.ServiceSpec{ClusterIP: dns.String(), Ports: ports},
	}
	if _, err := client.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the kube-dns Service: %w", err)
	}
	name, ready := func(s string) *string { return &s }, true
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns-localkube", Namespace: metav1.NamespaceSystem, Labels: map[string]string{
			discoveryv1.LabelServiceName: "kube-dns", discoveryv1.LabelManagedBy: "localkube"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{n.IP.String()}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
	}
	for _, p := range ports {
		proto, port := p.Protocol, p.Port
		slice.Ports = append(slice.Ports, discoveryv1.EndpointPort{Name: name(p.Name), Protocol: &proto, Port: &port})
	}
	if _, err := client.DiscoveryV1().EndpointSlices(slice.Namespace).Create(ctx, slice, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the kube-dns EndpointSlice: %w", err)
	}
	return nil
}

// WaitDNS waits until CoreDNS answers on the node, over TCP.
func (n *Node) WaitDNS(ctx context.Context, p *kubetest.Process) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return p.WaitReady(ctx, func(context.Context) error {
		return dialIn(n.NetNS, net.JoinHostPort(n.IP.String(), "53"))
	})
}

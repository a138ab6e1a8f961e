// Package dataplane gives localkube's clusters a data plane of real parts:
// network namespaces, CNI plugins, processes, kube-proxy and CoreDNS.
//
// The layout, for clusters 0..N-1 of one localkube run (every name carries
// the run's prefix, "plx<pid>-", so runs side by side never meet):
//
//	fabric netns   a bridge joining the nodes: one flat network, as the
//	               MCS API assumes between the clusters' Pod ranges
//	node netns     one per cluster, address 10.160.0.<N+1>/24 on the
//	               bridge, a route to every other cluster's Pod range via
//	               that cluster's node; kube-proxy (nftables mode) and
//	               CoreDNS run here, and a relay makes the cluster's
//	               kube-apiserver (on the host's loopback) answer at the
//	               same address inside
//	pod netns      one per Running Pod, wired to its node by the ptp CNI
//	               plugin with host-local addresses of 10.<128+N>.0.0/16;
//	               the Pod's container commands run here as real
//	               processes, with the Pod's resolv.conf (kube-dns)
//
// Nothing here touches the host's own network: every address, route and
// nftables rule lives inside namespaces this package makes and removes.
// It needs root, iproute2, nftables and Debian's containernetworking-plugins
// (Check says which is missing).
//
// The Runtime is the kubelet's share: it runs a Pod's containers (the
// host's binaries stand in for the image's), keeps them running per the
// restart policy, and serves exec and container logs to kube-apiserver over
// the kubelet's HTTPS API, so `kubectl exec` (WebSocket) and client-go's
// SPDY executor reach a process in the Pod's network namespace.
package dataplane

package dataplane

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/plexusnet/plexus/internal/testing/kubetest"
)

// Protocol is how Exec reaches the kubelet API through kube-apiserver.
type Protocol int

const (
	// SPDY is what client-go's SPDY executor speaks (the conformance
	// suite's).
	SPDY Protocol = iota
	// WebSocket is what kubectl speaks; kube-apiserver translates it for
	// the kubelet.
	WebSocket
)

// Exec runs command in the Pod's container (the first when container is
// empty) through kube-apiserver's pods/exec, and returns its output.
func Exec(ctx context.Context, cfg *rest.Config, namespace, pod, container string, command []string, proto Protocol) (stdout, stderr string, err error) {
	var out, errOut bytes.Buffer
	err = ExecTo(ctx, cfg, namespace, pod, container, command, proto, &out, &errOut)
	return out.String(), errOut.String(), err
}

// ExecTo is Exec with the output streamed to stdout and stderr as it comes.
func ExecTo(ctx context.Context, cfg *rest.Config, namespace, pod, container string, command []string, proto Protocol, stdout, stderr io.Writer) error {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	req := client.CoreV1().RESTClient().Post().Resource("pods").Namespace(namespace).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: command, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	var exec remotecommand.Executor
	switch proto {
	case WebSocket:
		exec, err = remotecommand.NewWebSocketExecutor(cfg, "GET", req.URL().String())
	default:
		exec, err = remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
	}
	if err != nil {
		return err
	}
	return exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: stdout, Stderr: stderr})
}

// StartForTest runs the data plane for the clusters until the test ends.
// Where it cannot run (not root, a tool or binary missing) the test fails
// and says why; only `go test -short` skips it.
func StartForTest(t testing.TB, clusters []ClusterNet) *Fleet {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping in -short: the data plane starts clusters, kube-proxy and CoreDNS")
	}
	bins := kubetest.RequireBinaries(t)
	coredns, err := Ready(bins)
	if err != nil {
		t.Fatalf("the data plane cannot run: %v (run as root; Debian: iproute2 nftables containernetworking-plugins socat netcat-openbsd bind9-dnsutils; make kube-binaries coredns)", err)
	}
	for i := range clusters {
		if clusters[i].Dir == "" {
			clusters[i].Dir = t.TempDir()
		}
	}
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	f, err := Start(context.Background(), bins, coredns, filepath.Join(t.TempDir(), "dataplane"), clusters, log)
	if err != nil {
		t.Fatalf("start the data plane: %v", err)
	}
	t.Cleanup(func() {
		if err := f.Stop(); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("stop the data plane: %v", err)
		}
	})
	return f
}

// testWriter sends log lines to the test's log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// PodCIDR is the N-th cluster's Pod range, as localkube hands them out:
// 10.<128+N>.0.0/16.
func PodCIDR(i int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(128 + i), 0, 0}), 16)
}

// ClusterNetFor is the N-th cluster's layout as localkube makes it: Pods
// in PodCIDR(N), Services in the cluster's own range.
func ClusterNetFor(c *kubetest.Cluster, i int, serviceCIDR netip.Prefix) ClusterNet {
	return ClusterNet{Cluster: c, Node: c.Name + "-node", PodCIDR: PodCIDR(i), ServiceCIDR: serviceCIDR}
}

package etcd_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/internal/testing/kubetest"
	"github.com/plexusnet/plexus/services/allocator/store/etcd"
)

// deadEndpoint is a loopback client URL nothing listens on: connections to
// it are refused, as to a member that is down.
func deadEndpoint(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return "http://" + addr
}

// TestReadyWithFirstEndpointDown: a member that is down, listed first, does
// not make a store whose etcd has a leader report not ready. Every replica
// lists the members in the same order, so they all would report
// NOT_SERVING together although etcd could serve them.
func TestReadyWithFirstEndpointDown(t *testing.T) {
	e := kubetest.StartEtcd(t)
	s, err := etcd.Open(etcd.Config{Endpoints: append([]string{deadEndpoint(t)}, e.Endpoints()...), Prefix: freshPrefix()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	// The runtime's readiness check timeout.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	require.NoError(t, s.Ready(ctx))
}

// TestReadyWhenNoEndpointAnswers: with every endpoint down, Ready fails
// within its context rather than waiting for one to come up.
func TestReadyWhenNoEndpointAnswers(t *testing.T) {
	s, err := etcd.Open(etcd.Config{Endpoints: []string{deadEndpoint(t), deadEndpoint(t)}, Prefix: freshPrefix()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	start := time.Now()
	err = s.Ready(ctx)
	require.ErrorContains(t, err, "etcd not ready")
	t.Log(err)
	require.Less(t, time.Since(start), 3*time.Second, "Ready keeps to its context")
}

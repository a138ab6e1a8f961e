package cmd

import (
	"io"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plexusnet/plexus/internal/apierr"
)

// TestUnreachableServiceSaysWhereItLooked: a call that reaches no server
// names the service, the address tried and how to name another, and keeps
// its status.
func TestUnreachableServiceSaysWhereItLooked(t *testing.T) {
	root := NewRoot(io.Discard)
	root.SetArgs([]string{"pool", "get", "vips", "--allocator-addr", "127.0.0.1:1", "--timeout", "5s"})
	err := root.Execute()
	require.Error(t, err)
	require.Equal(t, codes.Unavailable, status.Code(err))
	msg := describe(err)
	require.Contains(t, msg, "cannot reach the allocator at 127.0.0.1:1 (")
	require.Contains(t, msg, "--allocator-addr, PLEXUS_ALLOCATOR_ADDR or a config context")
}

// TestServersUnavailableAnswerKeepsItsWords: UNAVAILABLE from a server
// (with a reason: a replica behind, a server draining) is its own answer,
// not an unreachable server.
func TestServersUnavailableAnswerKeepsItsWords(t *testing.T) {
	addr := "127.0.0.1:7401"
	g := &globals{addrs: map[string]*string{"allocator": &addr}}
	answer := apierr.New(codes.Unavailable, "REPLICA_BEHIND", "this replica is behind the store", nil)
	require.Same(t, answer, g.unreachable("allocator", answer))
	require.NoError(t, g.unreachable("allocator", nil))
	notFound := status.Error(codes.NotFound, "no such pool")
	require.Same(t, notFound, g.unreachable("allocator", notFound))
}

package sources_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	membershipv1 "github.com/plexusnet/plexus/api/membership/v1"
	"github.com/plexusnet/plexus/internal/dial"
	"github.com/plexusnet/plexus/services/repair/sources"
)

// scripted is a membership whose every WatchServices stream sends what the
// test pushes into it, and ends (UNAVAILABLE) when the test closes it.
type scripted struct {
	membershipv1.UnimplementedMembershipServiceServer
	streams chan chan *membershipv1.WatchServicesResponse
}

func (s *scripted) WatchServices(req *membershipv1.WatchServicesRequest, stream grpc.ServerStreamingServer[membershipv1.WatchServicesResponse]) error {
	if !req.GetExportedOnly() {
		return status.Error(codes.InvalidArgument, "want exported_only")
	}
	ch := make(chan *membershipv1.WatchServicesResponse)
	select {
	case s.streams <- ch:
	case <-stream.Context().Done():
		return nil
	}
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return status.Error(codes.Unavailable, "membership restarting")
			}
			if err := stream.Send(ev); err != nil {
				return err
			}
		case <-stream.Context().Done():
			return nil
		}
	}
}

func ev(typ membershipv1.WatchEventType, service string, exported bool) *membershipv1.WatchServicesResponse {
	e := &membershipv1.WatchServicesResponse{Type: typ}
	if service != "" {
		e.Endpoints = &membershipv1.ServiceEndpoints{Service: service, Export: &membershipv1.ExportInfo{Exported: exported}}
	}
	return e
}

const (
	start  = membershipv1.WatchEventType_WATCH_EVENT_TYPE_SNAPSHOT_START
	end    = membershipv1.WatchEventType_WATCH_EVENT_TYPE_SNAPSHOT_END
	upsert = membershipv1.WatchEventType_WATCH_EVENT_TYPE_UPSERT
	del    = membershipv1.WatchEventType_WATCH_EVENT_TYPE_DELETE
)

func TestSourceFollowsExports(t *testing.T) {
	fake := &scripted{streams: make(chan chan *membershipv1.WatchServicesResponse)}
	gs := grpc.NewServer()
	membershipv1.RegisterMembershipServiceServer(gs, fake)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	conn, err := dial.New(lis.Addr().String(), dial.WithoutRetry())
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })

	src := sources.NewSource("east", lis.Addr().String(), conn, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); src.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	synced := func() bool { return src.Problem() == "" }
	require.Contains(t, src.Problem(), "source east")

	stream := <-fake.streams
	stream <- ev(start, "", false)
	stream <- ev(upsert, "namespaces/shop/services/db", true)
	stream <- ev(upsert, "namespaces/shop/services/cache", true)
	require.Eventually(t, func() bool { return strings.Contains(src.Problem(), "snapshot in progress") },
		5*time.Second, 5*time.Millisecond, "synced in the middle of a snapshot")
	stream <- ev(end, "", false)
	require.Eventually(t, synced, 5*time.Second, 5*time.Millisecond)
	require.True(t, src.Exports("shop", "db"))
	require.True(t, src.Exports("shop", "cache"))
	require.False(t, src.Exports("shop", "web"))

	stream <- ev(upsert, "namespaces/shop/services/web", true)
	stream <- ev(del, "namespaces/shop/services/db", false)
	stream <- ev(upsert, "namespaces/shop/services/cache", false) // no longer exported
	stream <- ev(upsert, "not-a-service-name", true)              // ignored
	require.Eventually(t, func() bool {
		return src.Exports("shop", "web") && !src.Exports("shop", "db") && !src.Exports("shop", "cache")
	}, 5*time.Second, 5*time.Millisecond)
	require.Equal(t, 1, src.Len())

	// The stream breaks: unsynced, the last view kept for reading.
	close(stream)
	require.Eventually(t, func() bool { return !synced() }, 5*time.Second, 5*time.Millisecond)
	require.Contains(t, src.Problem(), "not reachable")
	require.Contains(t, src.Problem(), "membership restarting")
	require.True(t, src.Exports("shop", "web"))

	// It reconnects with a fresh snapshot, which replaces everything.
	stream = <-fake.streams
	stream <- ev(start, "", false)
	stream <- ev(upsert, "namespaces/shop/services/db", true)
	stream <- ev(end, "", false)
	require.Eventually(t, synced, 5*time.Second, 5*time.Millisecond)
	require.True(t, src.Exports("shop", "db"))
	require.False(t, src.Exports("shop", "web"))

	// A change before any snapshot cannot be placed: the stream is
	// dropped and a new one asked for.
	close(stream)
	stream = <-fake.streams
	stream <- ev(upsert, "namespaces/shop/services/x", true)
	stream = <-fake.streams
	require.False(t, src.Exports("shop", "x"))
	close(stream)
}

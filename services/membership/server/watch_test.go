package server_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	membershipv1 "github.com/plexusnet/plexus/api/membership/v1"
	"github.com/plexusnet/plexus/internal/apierr"
	"github.com/plexusnet/plexus/internal/dial"
	"github.com/plexusnet/plexus/services/membership/endpoints"
	"github.com/plexusnet/plexus/services/membership/kube"
	"github.com/plexusnet/plexus/services/membership/selector"
	"github.com/plexusnet/plexus/services/membership/server"
	"github.com/plexusnet/plexus/services/membership/watch"
)

// synced is a Members that is always synced and knows no workloads.
type synced struct{}

func (synced) IsSynced() bool { return true }

func (synced) ServicesFor(endpoints.Kind, string, string) ([]selector.ServiceKey, error) {
	return nil, kube.ErrWorkloadNotFound
}

// serve runs the API over hub on a loopback port and returns a client.
func serve(t *testing.T, hub *watch.Hub[*membershipv1.ServiceEndpoints]) membershipv1.MembershipServiceClient {
	t.Helper()
	api, err := server.New(hub, synced{}, nil, "c1")
	require.NoError(t, err)
	g := grpc.NewServer()
	api.Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	conn, err := dial.New(lis.Addr().String(), dial.WithoutRetry())
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return membershipv1.NewMembershipServiceClient(conn)
}

// bigSet is an endpoint set of about 40 KB, so that a few of them fill a
// stream's flow-control window.
func bigSet(name string) *membershipv1.ServiceEndpoints {
	g := &membershipv1.EndpointGroup{AddressType: membershipv1.AddressType_ADDRESS_TYPE_IPV4}
	for i := range 400 {
		g.Endpoints = append(g.Endpoints, &membershipv1.Endpoint{
			Addresses: []string{fmt.Sprintf("10.0.%d.%d", i/250, i%250+1)},
			TargetRef: &membershipv1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: strings.Repeat("p", 40) + fmt.Sprint(i)},
		})
	}
	return &membershipv1.ServiceEndpoints{Service: "namespaces/ns/services/" + name, Cluster: "c1", Groups: []*membershipv1.EndpointGroup{g}}
}

// TestSlowWatcherIsCutOff shows that a client that stops reading neither
// blocks publishing nor stays connected: once its queue overflows, the
// stream ends with RESOURCE_EXHAUSTED (WATCH_TOO_SLOW), after the events
// that were already on their way.
func TestSlowWatcherIsCutOff(t *testing.T) {
	hub := watch.New[*membershipv1.ServiceEndpoints](watch.WithMaxPending(8))
	client := serve(t, hub)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := client.WatchServices(ctx, &membershipv1.WatchServicesRequest{})
	require.NoError(t, err)
	first, err := stream.Recv()
	require.NoError(t, err)
	require.Equal(t, membershipv1.WatchEventType_WATCH_EVENT_TYPE_SNAPSHOT_START, first.GetType())
	require.Eventually(t, func() bool { return hub.Subscribers() == 1 }, 5*time.Second, 10*time.Millisecond)

	// The client reads nothing more. Publishing never waits for it.
	start := time.Now()
	for i := 0; hub.Subscribers() > 0; i++ {
		require.Less(t, i, 10_000, "the slow subscriber was never cut off")
		hub.Publish(watch.Change[*membershipv1.ServiceEndpoints]{
			Key: watch.Key{Namespace: "ns", Name: fmt.Sprint("svc-", i)}, Present: true, Value: bigSet(fmt.Sprint("svc-", i)),
		})
	}
	require.Less(t, time.Since(start), 10*time.Second)

	var got int
	for {
		ev, err := stream.Recv()
		if err != nil {
			require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
			require.Equal(t, server.ReasonWatchTooSlow, apierr.Reason(err))
			break
		}
		got++
		require.Less(t, got, 10_000)
		require.NotEqual(t, membershipv1.WatchEventType_WATCH_EVENT_TYPE_SNAPSHOT_START, ev.GetType())
	}
	t.Logf("%d events arrived before the cut-off", got)
}

func TestWatchEvents(t *testing.T) {
	hub := watch.New[*membershipv1.ServiceEndpoints](watch.WithEpoch("e1"))
	client := serve(t, hub)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	observed := time.Unix(1700000000, 0)
	hub.Publish(watch.Change[*membershipv1.ServiceEndpoints]{
		Key: watch.Key{Namespace: "ns", Name: "a"}, Present: true, Value: bigSet("a"),
		ObserveTime: observed, TraceContext: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
	})
	stream, err := client.WatchServices(ctx, &membershipv1.WatchServicesRequest{Namespace: "ns"})
	require.NoError(t, err)
	var types []membershipv1.WatchEventType
	for range 3 {
		ev, err := stream.Recv()
		require.NoError(t, err)
		require.Equal(t, "e1", ev.GetEpoch())
		require.Equal(t, uint64(1), ev.GetRevision())
		require.Equal(t, "c1", ev.GetCluster(), "every event names the cluster the membership serves")
		types = append(types, ev.GetType())
		if ev.GetType() == membershipv1.WatchEventType_WATCH_EVENT_TYPE_UPSERT {
			require.True(t, observed.Equal(ev.GetObserveTime().AsTime()))
			require.Equal(t, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", ev.GetTraceContext()["traceparent"])
			require.Equal(t, "namespaces/ns/services/a", ev.GetEndpoints().GetService())
		}
	}
	require.Equal(t, []membershipv1.WatchEventType{
		membershipv1.WatchEventType_WATCH_EVENT_TYPE_SNAPSHOT_START,
		membershipv1.WatchEventType_WATCH_EVENT_TYPE_UPSERT,
		membershipv1.WatchEventType_WATCH_EVENT_TYPE_SNAPSHOT_END,
	}, types)

	hub.Publish(watch.Change[*membershipv1.ServiceEndpoints]{Key: watch.Key{Namespace: "ns", Name: "a"}})
	ev, err := stream.Recv()
	require.NoError(t, err)
	require.Equal(t, membershipv1.WatchEventType_WATCH_EVENT_TYPE_DELETE, ev.GetType())
	require.Equal(t, "namespaces/ns/services/a", ev.GetEndpoints().GetService())
	require.Equal(t, "c1", ev.GetEndpoints().GetCluster())
	require.Equal(t, "c1", ev.GetCluster())
	require.Empty(t, ev.GetEndpoints().GetGroups())

	_, err = client.GetServiceMembers(ctx, &membershipv1.GetServiceMembersRequest{Service: "namespaces/ns/services/a"})
	require.Equal(t, server.ReasonServiceNotFound, apierr.Reason(err))

	bad, err := client.WatchServices(ctx, &membershipv1.WatchServicesRequest{Namespace: "Not A Namespace"})
	require.NoError(t, err)
	_, err = bad.Recv()
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	require.Equal(t, "namespace", apierr.FieldViolations(err)[0].Field)
}

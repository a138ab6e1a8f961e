package sources_test

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	membershipv1 "github.com/plexusnet/plexus/api/membership/v1"
	"github.com/plexusnet/plexus/internal/testing/servertest"
	"github.com/plexusnet/plexus/services/importer/exports"
	"github.com/plexusnet/plexus/services/importer/sources"
	"github.com/plexusnet/plexus/services/importer/sourcetest"
)

const wait, tick = 10 * time.Second, 10 * time.Millisecond

func follow(t *testing.T, name, addr string, store *exports.Store) *sources.Source {
	t.Helper()
	return followWith(t, name, addr, store, func(*sources.Config) {})
}

func followWith(t *testing.T, name, addr string, store *exports.Store, configure func(*sources.Config)) *sources.Source {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	m, err := sources.NewMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	cfg := sources.Config{Name: name, Addr: addr, Conn: conn, Sink: store, Metrics: m,
		BackoffMin: 20 * time.Millisecond, BackoffMax: 100 * time.Millisecond, Settle: 50 * time.Millisecond}
	configure(&cfg)
	src, err := sources.New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		src.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return src
}

func endpointCount(store *exports.Store, key exports.Key, cluster string) int {
	svc, ok := store.Get(key)
	if !ok {
		return -1
	}
	e, ok := svc.Export(cluster)
	if !ok {
		return -1
	}
	n := 0
	for _, g := range e.Endpoints.GetGroups() {
		n += len(g.GetEndpoints())
	}
	return n
}

func TestSnapshotEventsAndResume(t *testing.T) {
	fake := sourcetest.Start(t, "east")
	fake.Set(sourcetest.Endpoints("shop", "cart", []string{"http=8080"}, "10.0.0.1"))
	fake.Set(sourcetest.Endpoints("shop", "web", []string{"http=8080"}, "10.0.0.2"))
	store := exports.New(nil)
	store.AddSource("east")
	src := follow(t, "east", fake.Addr(), store)

	cart, web := exports.Key{Namespace: "shop", Name: "cart"}, exports.Key{Namespace: "shop", Name: "web"}
	require.Eventually(t, func() bool { st, _ := store.Source("east"); return st.Synced && st.Connected }, wait, tick)
	require.Equal(t, []exports.Key{cart, web}, store.Keys())
	require.Equal(t, sources.Position{Epoch: fake.Epoch(), Revision: 2}, src.Position())

	fake.Set(sourcetest.Endpoints("shop", "cart", []string{"http=8080"}, "10.0.0.1", "10.0.0.3"))
	require.Eventually(t, func() bool { return endpointCount(store, cart, "east") == 2 }, wait, tick)
	fake.Delete(web.ServiceName())
	require.Eventually(t, func() bool { _, ok := store.Get(web); return !ok }, wait, tick)
	require.Equal(t, uint64(4), src.Position().Revision)

	// A cut stream resumes where it was: the changes made meanwhile come
	// without a snapshot.
	fake.Disconnect()
	fake.Set(sourcetest.Endpoints("shop", "cart", []string{"http=8080"}, "10.0.0.1", "10.0.0.3", "10.0.0.4"))
	require.Eventually(t, func() bool { return endpointCount(store, cart, "east") == 3 }, wait, tick)
	reqs := fake.Requests()
	require.GreaterOrEqual(t, len(reqs), 2)
	last := reqs[len(reqs)-1]
	require.True(t, last.GetExportedOnly())
	require.Equal(t, fake.Epoch(), last.GetEpoch())
	require.EqualValues(t, 4, last.GetStartRevision())
}

func TestUnreachableSourceKeepsItsExports(t *testing.T) {
	fake := sourcetest.Start(t, "east")
	fake.Set(sourcetest.Endpoints("shop", "cart", []string{"http=8080"}, "10.0.0.1"))
	fake.Set(sourcetest.Endpoints("shop", "web", []string{"http=8080"}, "10.0.0.2"))
	store := exports.New(nil)
	store.AddSource("east")
	follow(t, "east", fake.Addr(), store)
	require.Eventually(t, func() bool { st, _ := store.Source("east"); return st.Connected && store.Len() == 2 }, wait, tick)

	fake.Stop()
	require.Eventually(t, func() bool { st, _ := store.Source("east"); return !st.Connected }, wait, tick)
	st, _ := store.Source("east")
	require.True(t, st.Synced, "a source that once synced stays the last word on its exports")
	require.False(t, st.LastHeard.IsZero())
	require.Equal(t, 2, store.Len(), "the last known exports stay while the source is down")

	// While it is down, web is withdrawn and the source restarts with a new
	// epoch: the fresh snapshot withdraws web here too.
	fake.Delete("namespaces/shop/services/web")
	fake.Restart(true)
	require.Eventually(t, func() bool {
		st, _ := store.Source("east")
		return st.Connected && store.Len() == 1
	}, wait, tick)
	_, ok := store.Get(exports.Key{Namespace: "shop", Name: "cart"})
	require.True(t, ok)
}

func TestRefusedWatchIsRetried(t *testing.T) {
	fake := sourcetest.Start(t, "east")
	fake.Refuse(status.Error(codes.Unavailable, "membership has not synced its caches yet"))
	fake.Set(sourcetest.Endpoints("shop", "cart", []string{"http=8080"}, "10.0.0.1"))
	store := exports.New(nil)
	store.AddSource("east")
	src := follow(t, "east", fake.Addr(), store)
	require.Eventually(t, func() bool { return len(fake.Requests()) >= 2 }, wait, tick)
	st, _ := store.Source("east")
	require.False(t, st.Synced)
	require.False(t, st.Connected, "a refused stream never counts as up")
	require.Error(t, src.LastError())
	fake.Refuse(nil)
	require.Eventually(t, func() bool { return store.Len() == 1 }, wait, tick)
}

// TestUnavailableMemberIsNoWarningAtFirst: a member that answers
// UNAVAILABLE (starting, not synced yet) is retried and logged at info;
// only once it has been so for UnavailableQuiet is it a warning. Any other
// refusal is one at once.
func TestUnavailableMemberIsNoWarningAtFirst(t *testing.T) {
	fake := sourcetest.Start(t, "east")
	fake.Refuse(status.Error(codes.Unavailable, "membership has not synced its caches yet"))
	logs := &servertest.Buffer{}
	store := exports.New(nil)
	store.AddSource("east")
	followWith(t, "east", fake.Addr(), store, func(c *sources.Config) {
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
		c.UnavailableQuiet = 500 * time.Millisecond
	})
	require.Eventually(t, func() bool { return len(fake.Requests()) >= 3 }, wait, tick)
	require.Contains(t, logs.String(), `level=INFO msg="source stream ended; keeping its last known exports"`)
	require.NotContains(t, logs.String(), "level=WARN")
	require.Eventually(t, func() bool {
		return strings.Contains(logs.String(), `level=WARN msg="source stream ended; keeping its last known exports"`)
	}, wait, tick, "still unavailable after UnavailableQuiet")

	denied := sourcetest.Start(t, "west")
	denied.Refuse(status.Error(codes.PermissionDenied, "not allowed"))
	logs2 := &servertest.Buffer{}
	store.AddSource("west")
	followWith(t, "west", denied.Addr(), store, func(c *sources.Config) { c.Logger = slog.New(slog.NewTextHandler(logs2, nil)) })
	require.Eventually(t, func() bool {
		return strings.Contains(logs2.String(), `level=WARN msg="source stream ended; keeping its last known exports"`)
	}, wait, tick)
}

// cutSnapshot is a membership whose first stream breaks in the middle of
// its snapshot.
type cutSnapshot struct {
	membershipv1.UnimplementedMembershipServiceServer
	mu    sync.Mutex
	calls []*membershipv1.WatchServicesRequest
}

func (c *cutSnapshot) WatchServices(req *membershipv1.WatchServicesRequest, stream grpc.ServerStreamingServer[membershipv1.WatchServicesResponse]) error {
	c.mu.Lock()
	c.calls = append(c.calls, req)
	n := len(c.calls)
	c.mu.Unlock()
	send := func(typ membershipv1.WatchEventType, eps *membershipv1.ServiceEndpoints) error {
		return stream.Send(&membershipv1.WatchServicesResponse{Type: typ, Endpoints: eps, Revision: 7, Epoch: "e1"})
	}
	upsert := membershipv1.WatchEventType_WATCH_EVENT_TYPE_UPSERT
	if err := send(membershipv1.WatchEventType_WATCH_EVENT_TYPE_SNAPSHOT_START, nil); err != nil {
		return err
	}
	if err := send(upsert, sourcetest.Endpoints("shop", "a", []string{"http=80"}, "10.0.0.1")); err != nil {
		return err
	}
	if n == 1 {
		return status.Error(codes.Unavailable, "cut in the middle of the snapshot")
	}
	if err := send(upsert, sourcetest.Endpoints("shop", "b", []string{"http=80"}, "10.0.0.2")); err != nil {
		return err
	}
	if err := send(membershipv1.WatchEventType_WATCH_EVENT_TYPE_SNAPSHOT_END, nil); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

func TestCutSnapshotChangesNothing(t *testing.T) {
	srv := &cutSnapshot{}
	gs := grpc.NewServer()
	membershipv1.RegisterMembershipServiceServer(gs, srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)

	store := exports.New(nil)
	store.AddSource("east")
	// What the source exported before stays until a complete snapshot.
	_, _, err = store.Upsert("east", exports.OriginWatch, exports.Update{Endpoints: sourcetest.Endpoints("shop", "old", []string{"http=80"}, "10.0.0.9")})
	require.NoError(t, err)
	src := follow(t, "east", lis.Addr().String(), store)
	require.Eventually(t, func() bool { st, _ := store.Source("east"); return st.Synced }, wait, tick)
	require.Equal(t, []exports.Key{{Namespace: "shop", Name: "a"}, {Namespace: "shop", Name: "b"}}, store.Keys())
	srv.mu.Lock()
	defer srv.mu.Unlock()
	require.Len(t, srv.calls, 2)
	require.Zero(t, srv.calls[1].GetStartRevision(), "a cut snapshot must not be resumed")
	require.Equal(t, sources.Position{Epoch: "e1", Revision: 7}, src.Position())
}

package server_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
)

func TestAllocateIsIdempotentPerOwner(t *testing.T) {
	e := start(t)
	e.createPool(t, "p", poolV4("10.0.0.0/24"))
	o := pod("ns", "web-0")

	first, err := e.client.Allocate(ctx(t), &allocatorv1.AllocateRequest{Pool: "pools/p", Owner: o})
	require.NoError(t, err)
	require.True(t, first.GetCreated())
	a := first.GetAllocation()
	require.Equal(t, "pools/p/allocations/"+a.GetAddress(), a.GetName())
	require.Equal(t, "pools/p", a.GetPool())
	require.True(t, proto.Equal(o, a.GetOwner()))
	require.NotEmpty(t, a.GetEtag())

	// Asking again, also with the address it holds, returns the same
	// allocation unchanged.
	for _, addr := range []string{"", a.GetAddress()} {
		again, err := e.client.Allocate(ctx(t), &allocatorv1.AllocateRequest{Pool: "pools/p", Owner: o, Address: addr})
		require.NoError(t, err)
		require.False(t, again.GetCreated())
		require.True(t, proto.Equal(a, again.GetAllocation()), "%v != %v", a, again.GetAllocation())
	}

	// The uid is not part of the owner's identity: a recreated owner of
	// the same name keeps the address, under a new etag and its own uid,
	// so a guarded release by someone who saw the old incarnation fails.
	recreated := proto.Clone(o).(*allocatorv1.Owner)
	recreated.Uid = "uid-new"
	again, err := e.client.Allocate(ctx(t), &allocatorv1.AllocateRequest{Pool: "pools/p", Owner: recreated})
	require.NoError(t, err)
	require.False(t, again.GetCreated())
	require.Equal(t, a.GetAddress(), again.GetAllocation().GetAddress())
	require.Equal(t, "uid-new", again.GetAllocation().GetOwner().GetUid())
	require.NotEqual(t, a.GetEtag(), again.GetAllocation().GetEtag())
	_, err = e.client.Release(ctx(t), &allocatorv1.ReleaseRequest{Name: a.GetName(), Etag: a.GetEtag()})
	requireStatus(t, err, codes.FailedPrecondition, "ETAG_MISMATCH", "")
	_, err = e.client.Release(ctx(t), &allocatorv1.ReleaseRequest{Name: a.GetName(), OwnerUid: o.GetUid()})
	requireStatus(t, err, codes.FailedPrecondition, "OWNER_MISMATCH", "")

	pool, err := e.client.GetPool(ctx(t), &allocatorv1.GetPoolRequest{Name: "pools/p"})
	require.NoError(t, err)
	require.Equal(t, uint64(1), pool.GetPool().GetStats().GetAllocated())
	require.Equal(t, "254", pool.GetPool().GetStats().GetCapacity())
	require.Equal(t, "253", pool.GetPool().GetStats().GetFree())
}

func TestRequestIDRetryGetsTheFirstAnswer(t *testing.T) {
	e := start(t)
	e.createPool(t, "p", poolV4("10.0.0.0/24"))

	// A retried CreatePool answers with the pool instead of ALREADY_EXISTS.
	createReq := &allocatorv1.CreatePoolRequest{PoolId: "q", Pool: poolV4("10.1.0.0/24"), RequestId: "create-q"}
	created, err := e.client.CreatePool(ctx(t), createReq)
	require.NoError(t, err)
	retried, err := e.client.CreatePool(ctx(t), createReq)
	require.NoError(t, err)
	require.Equal(t, created.GetPool().GetEtag(), retried.GetPool().GetEtag())

	req := &allocatorv1.AllocateRequest{Pool: "pools/p", Owner: pod("ns", "a"), RequestId: "req-a"}
	first, err := e.client.Allocate(ctx(t), req)
	require.NoError(t, err)
	require.True(t, first.GetCreated())
	for range 3 {
		again, err := e.client.Allocate(ctx(t), req)
		require.NoError(t, err)
		require.False(t, again.GetCreated())
		require.True(t, proto.Equal(first.GetAllocation(), again.GetAllocation()))
	}

	batch := &allocatorv1.BatchAllocateRequest{RequestId: "batch-1", Requests: []*allocatorv1.AllocateRequest{
		{Pool: "pools/p", Owner: pod("ns", "b")},
		{Pool: "pools/q", Owner: pod("ns", "b")},
	}}
	bfirst, err := e.client.BatchAllocate(ctx(t), batch)
	require.NoError(t, err)
	bagain, err := e.client.BatchAllocate(ctx(t), batch)
	require.NoError(t, err)
	require.Len(t, bagain.GetAllocations(), 2)
	for i := range bfirst.GetAllocations() {
		require.True(t, proto.Equal(bfirst.GetAllocations()[i], bagain.GetAllocations()[i]))
	}

	// Only the first request made anything.
	list, err := e.client.ListAllocations(ctx(t), &allocatorv1.ListAllocationsRequest{Pool: "pools/-"})
	require.NoError(t, err)
	require.Len(t, list.GetAllocations(), 3)
}

func TestBatchAllocateDualStackAllOrNothing(t *testing.T) {
	e := start(t)
	e.createPool(t, "v4", poolV4("10.0.0.0/30")) // two usable addresses
	e.createPool(t, "v6", poolV4("fd00:10::/64"))

	dual := func(name string) *allocatorv1.BatchAllocateRequest {
		o := pod("ns", name)
		return &allocatorv1.BatchAllocateRequest{Requests: []*allocatorv1.AllocateRequest{
			{Pool: "pools/v6", Owner: o}, {Pool: "pools/v4", Owner: o},
		}}
	}
	for _, name := range []string{"a", "b"} {
		resp, err := e.client.BatchAllocate(ctx(t), dual(name))
		require.NoError(t, err)
		require.Len(t, resp.GetAllocations(), 2)
		v6, v4 := resp.GetAllocations()[0], resp.GetAllocations()[1]
		require.Equal(t, "pools/v6", v6.GetPool())
		require.True(t, netip.MustParseAddr(v6.GetAddress()).Is6())
		require.Equal(t, "pools/v4", v4.GetPool())
		require.True(t, netip.MustParseAddr(v4.GetAddress()).Is4())
		require.Equal(t, v4.GetRevision(), v6.GetRevision(), "one commit")
	}

	// The IPv4 pool is full: the IPv6 half must not be kept either.
	_, err := e.client.BatchAllocate(ctx(t), dual("c"))
	requireStatus(t, err, codes.ResourceExhausted, "POOL_EXHAUSTED", "")
	// Nor when a later request of the batch is bad input.
	_, err = e.client.BatchAllocate(ctx(t), &allocatorv1.BatchAllocateRequest{Requests: []*allocatorv1.AllocateRequest{
		{Pool: "pools/v6", Owner: pod("ns", "d")},
		{Pool: "pools/v6", Owner: pod("ns", "e"), Address: "fd00:11::1"},
	}})
	requireStatus(t, err, codes.InvalidArgument, "ADDRESS_OUT_OF_RANGE", "requests[1].address")

	for pool, want := range map[string]int{"v4": 2, "v6": 2} {
		list, err := e.client.ListAllocations(ctx(t), &allocatorv1.ListAllocationsRequest{Pool: "pools/" + pool})
		require.NoError(t, err)
		require.Len(t, list.GetAllocations(), want, pool)
		for _, a := range list.GetAllocations() {
			require.Contains(t, []string{"a", "b"}, a.GetOwner().GetName())
		}
		p, err := e.client.GetPool(ctx(t), &allocatorv1.GetPoolRequest{Name: "pools/" + pool})
		require.NoError(t, err)
		require.Equal(t, uint64(want), p.GetPool().GetStats().GetAllocated())
	}

	// A batch for owners that already hold addresses is answered with them.
	resp, err := e.client.BatchAllocate(ctx(t), dual("a"))
	require.NoError(t, err)
	require.Len(t, resp.GetAllocations(), 2)
}

func TestReleaseIsGuarded(t *testing.T) {
	e := start(t)
	e.createPool(t, "p", poolV4("10.0.0.0/24"))
	o := pod("ns", "a")
	a := e.allocate(t, "p", o)

	// Released by a guarded call that saw the right etag and uid.
	resp, err := e.client.Release(ctx(t), &allocatorv1.ReleaseRequest{Name: a.GetName(), Etag: a.GetEtag(), OwnerUid: o.GetUid()})
	require.NoError(t, err)
	require.True(t, proto.Equal(a, resp.GetAllocation()))

	// The same owner gets a new allocation with a new etag; the old etag
	// no longer releases it.
	b := e.allocate(t, "p", o)
	require.NotEqual(t, a.GetEtag(), b.GetEtag())
	_, err = e.client.Release(ctx(t), &allocatorv1.ReleaseRequest{Name: b.GetName(), Etag: a.GetEtag()})
	requireStatus(t, err, codes.FailedPrecondition, "ETAG_MISMATCH", "")

	resp, err = e.client.Release(ctx(t), &allocatorv1.ReleaseRequest{Pool: "pools/p", Owner: o, Etag: b.GetEtag()})
	require.NoError(t, err)
	require.Equal(t, b.GetAddress(), resp.GetAllocation().GetAddress())

	// Nothing left: allow_missing makes that a success with no allocation.
	resp, err = e.client.Release(ctx(t), &allocatorv1.ReleaseRequest{Pool: "pools/p", Owner: o, AllowMissing: true})
	require.NoError(t, err)
	require.Nil(t, resp.GetAllocation())
}

// listAll pages through ListAllocations and checks that every page but
// the last is full and that the last has no token.
func listAll(t *testing.T, e *env, req *allocatorv1.ListAllocationsRequest) []*allocatorv1.Allocation {
	t.Helper()
	var out []*allocatorv1.Allocation
	for pages := 0; ; pages++ {
		require.Less(t, pages, 1000, "pagination does not end")
		resp, err := e.client.ListAllocations(ctx(t), req)
		require.NoError(t, err)
		out = append(out, resp.GetAllocations()...)
		if resp.GetNextPageToken() == "" {
			return out
		}
		require.Len(t, resp.GetAllocations(), int(req.GetPageSize()), "a page before the last is short")
		req = proto.Clone(req).(*allocatorv1.ListAllocationsRequest)
		req.PageToken = resp.GetNextPageToken()
	}
}

func TestListAllocationsPagination(t *testing.T) {
	e := start(t)
	e.createPool(t, "a", poolV4("10.0.0.0/24"))
	e.createPool(t, "b", poolV4("10.1.0.0/24"))
	e.createPool(t, "c", poolV4("fd00::/120"))
	type key struct{ pool, addr string }
	var all []*allocatorv1.Allocation
	for i := range 40 {
		pool := []string{"a", "b", "c"}[i%3]
		o := &allocatorv1.Owner{
			Cluster:   []string{"east", "west"}[i%2],
			Kind:      []string{"Pod", "Service", "ExternalWorkload", "Pod"}[i%4],
			Namespace: []string{"default", "kube-system", "shop"}[i%5%3],
			Name:      fmt.Sprintf("w-%02d", i),
			Uid:       fmt.Sprintf("uid-%d", i),
		}
		all = append(all, e.allocate(t, pool, o))
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].GetPool() != all[j].GetPool() {
			return all[i].GetPool() < all[j].GetPool()
		}
		return netip.MustParseAddr(all[i].GetAddress()).Less(netip.MustParseAddr(all[j].GetAddress()))
	})
	match := func(req *allocatorv1.ListAllocationsRequest) []*allocatorv1.Allocation {
		var out []*allocatorv1.Allocation
		for _, a := range all {
			o := a.GetOwner()
			if (req.GetPool() == "pools/-" || req.GetPool() == a.GetPool()) &&
				(req.GetOwnerCluster() == "" || req.GetOwnerCluster() == o.GetCluster()) &&
				(req.GetOwnerKind() == "" || req.GetOwnerKind() == o.GetKind()) &&
				(req.GetOwnerNamespace() == "" || req.GetOwnerNamespace() == o.GetNamespace()) &&
				(req.GetOwnerName() == "" || req.GetOwnerName() == o.GetName()) &&
				(req.GetOwnerUid() == "" || req.GetOwnerUid() == o.GetUid()) {
				out = append(out, a)
			}
		}
		return out
	}
	filters := []*allocatorv1.ListAllocationsRequest{
		{Pool: "pools/-"},
		{Pool: "pools/b"},
		{Pool: "pools/-", OwnerKind: "Pod"},
		{Pool: "pools/-", OwnerKind: "Pod", OwnerNamespace: "default"},
		{Pool: "pools/a", OwnerCluster: "west"},
		{Pool: "pools/-", OwnerName: "w-07"},
		{Pool: "pools/-", OwnerUid: "uid-12"},
		{Pool: "pools/c", OwnerKind: "Service", OwnerNamespace: "shop"},
		{Pool: "pools/-", OwnerKind: "NoSuchKind"},
	}
	for _, f := range filters {
		want := match(f)
		for _, size := range []int32{1, 3, 7, 40, 1000} {
			t.Run(fmt.Sprintf("%s/size=%d", strings.TrimSpace(strings.ReplaceAll(f.String(), "\"", "")), size), func(t *testing.T) {
				req := proto.Clone(f).(*allocatorv1.ListAllocationsRequest)
				req.PageSize = size
				got := listAll(t, e, req)
				require.Len(t, got, len(want))
				seen := map[key]bool{}
				for i := range got {
					k := key{got[i].GetPool(), got[i].GetAddress()}
					require.False(t, seen[k], "%v listed twice", k)
					seen[k] = true
					require.True(t, proto.Equal(want[i], got[i]), "item %d: want %v, got %v", i, want[i], got[i])
				}
			})
		}
	}
}

func TestListPoolsPagination(t *testing.T) {
	e := start(t)
	var want []string
	for i := range 11 {
		id := fmt.Sprintf("pool-%02d", i)
		e.createPool(t, id, poolV4(fmt.Sprintf("10.%d.0.0/16", i)))
		want = append(want, "pools/"+id)
	}
	for _, size := range []int32{1, 2, 5, 11, 0} {
		t.Run(fmt.Sprintf("size=%d", size), func(t *testing.T) {
			var got []string
			token := ""
			for pages := 0; ; pages++ {
				require.Less(t, pages, 100)
				resp, err := e.client.ListPools(ctx(t), &allocatorv1.ListPoolsRequest{PageSize: size, PageToken: token})
				require.NoError(t, err)
				for _, p := range resp.GetPools() {
					got = append(got, p.GetName())
					require.Equal(t, "65534", p.GetStats().GetCapacity())
				}
				if token = resp.GetNextPageToken(); token == "" {
					break
				}
				require.Len(t, resp.GetPools(), int(size))
			}
			require.Equal(t, want, got)
		})
	}
}

// event is a watch event reduced to what the tests compare.
type event struct {
	typ  allocatorv1.EventType
	addr string
	name string
	rev  int64
}

func eventOf(r *allocatorv1.WatchAllocationsResponse) event {
	return event{typ: r.GetType(), addr: r.GetAllocation().GetAddress(), name: r.GetAllocation().GetOwner().GetName(), rev: r.GetRevision()}
}

func TestWatchSnapshotSyncedLiveAndResume(t *testing.T) {
	e := start(t)
	e.createPool(t, "p", poolV4("10.0.0.0/24"))
	e.createPool(t, "q", poolV4("10.1.0.0/24"))
	before := map[string]*allocatorv1.Allocation{}
	for _, n := range []string{"a", "b", "c"} {
		before[n] = e.allocate(t, "p", pod("ns", n))
	}
	e.allocate(t, "q", pod("ns", "other-pool"))

	wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := e.client.WatchAllocations(wctx, &allocatorv1.WatchAllocationsRequest{Pool: "pools/p"})
	require.NoError(t, err)

	// The snapshot: every allocation of the pool, then SYNCED.
	snap := recvUntil(t, stream, 4)
	for _, ev := range snap[:3] {
		require.Equal(t, allocatorv1.EventType_EVENT_TYPE_ADDED, ev.GetType())
		want := before[ev.GetAllocation().GetOwner().GetName()]
		require.NotNil(t, want, "snapshot holds %v", ev.GetAllocation())
		require.True(t, proto.Equal(want, ev.GetAllocation()))
	}
	synced := snap[3]
	require.Equal(t, allocatorv1.EventType_EVENT_TYPE_SYNCED, synced.GetType())
	require.Nil(t, synced.GetAllocation())

	// Live changes, with changes of another pool in between that this
	// watch must not see.
	var want []event
	noise := 0
	change := func(release bool, name string) {
		if release {
			resp, err := e.client.Release(ctx(t), &allocatorv1.ReleaseRequest{Pool: "pools/p", Owner: pod("ns", name)})
			require.NoError(t, err)
			want = append(want, event{typ: allocatorv1.EventType_EVENT_TYPE_DELETED, addr: resp.GetAllocation().GetAddress(), name: name})
		} else {
			a := e.allocate(t, "p", pod("ns", name))
			want = append(want, event{typ: allocatorv1.EventType_EVENT_TYPE_ADDED, addr: a.GetAddress(), name: name, rev: a.GetRevision()})
		}
		noise++
		e.allocate(t, "q", pod("ns", fmt.Sprintf("noise-%d", noise)))
	}
	change(false, "d")
	change(true, "a")
	change(false, "e")
	live := recvUntil(t, stream, 3)
	var lastRev int64 = synced.GetRevision()
	for i, r := range live {
		got := eventOf(r)
		require.Greater(t, got.rev, lastRev, "revisions increase")
		lastRev = got.rev
		if want[i].rev == 0 {
			want[i].rev = got.rev // a release's revision is only known from the event
		}
		require.Equal(t, want[i], got)
	}
	resumeAt := live[1].GetRevision()
	cancel()

	// More changes while nobody watches, then resume from the middle of
	// what was seen: exactly the changes after that revision, once each.
	change(true, "b")
	change(false, "f")
	change(true, "d")
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()
	resumed, err := e.client.WatchAllocations(rctx, &allocatorv1.WatchAllocationsRequest{Pool: "pools/p", StartRevision: resumeAt})
	require.NoError(t, err)
	got := recvUntil(t, resumed, 4)
	for i, r := range got {
		w := want[2+i]
		ev := eventOf(r)
		if w.rev == 0 {
			w.rev = ev.rev
		}
		require.Equal(t, w, ev, "event %d after resume", i)
		require.Greater(t, ev.rev, resumeAt)
	}
	// Nothing else arrives: no duplicates, no snapshot, no SYNCED.
	quiet, qcancel := context.WithTimeout(rctx, 200*time.Millisecond)
	defer qcancel()
	extra, err := e.client.WatchAllocations(quiet, &allocatorv1.WatchAllocationsRequest{Pool: "pools/p", StartRevision: got[3].GetRevision()})
	require.NoError(t, err)
	_, err = extra.Recv()
	requireCode(t, err, codes.DeadlineExceeded)

	// A watch of every pool sees the other pool's changes too.
	all, err := e.client.WatchAllocations(rctx, &allocatorv1.WatchAllocationsRequest{Pool: "pools/-", StartRevision: resumeAt})
	require.NoError(t, err)
	pools := map[string]int{}
	for _, r := range recvUntil(t, all, 9) {
		pools[r.GetAllocation().GetPool()]++
	}
	// In pool q: the noise of the release of a and of the four changes
	// after it.
	require.Equal(t, map[string]int{"pools/p": 4, "pools/q": 5}, pools)
}

func requireCode(t *testing.T, err error, code codes.Code) {
	t.Helper()
	require.Error(t, err)
	require.Equal(t, code.String(), status.Code(err).String(), "%v", err)
}

// TestConcurrentAllocateReleaseThroughTheServer has 64 clients allocate
// and release on a pool smaller than their number, through the real
// server, and checks against a model that no address is ever handed to
// two holders at once.
func TestConcurrentAllocateReleaseThroughTheServer(t *testing.T) {
	const (
		clients = 64
		rounds  = 50
	)
	e := start(t)
	e.createPool(t, "small", poolV4("10.9.0.0/27")) // 30 addresses for 64 clients
	var (
		mu        sync.Mutex
		holder    = map[string]string{}
		exhausted atomic.Int64
		wg        sync.WaitGroup
		errs      = make(chan error, clients)
	)
	deadline := time.Now().Add(30 * time.Second)
	for g := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; {
				if time.Now().After(deadline) {
					errs <- fmt.Errorf("client %d: only %d rounds before the deadline", g, r)
					return
				}
				o := pod("load", fmt.Sprintf("c%d-r%d", g, r))
				resp, err := e.client.Allocate(ctx(t), &allocatorv1.AllocateRequest{Pool: "pools/small", Owner: o})
				if status.Code(err) == codes.ResourceExhausted {
					exhausted.Add(1)
					// Back off as a client would: part of the load, not
					// a wait for anything.
					time.Sleep(time.Millisecond)
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				a := resp.GetAllocation()
				mu.Lock()
				if h, busy := holder[a.GetAddress()]; busy {
					mu.Unlock()
					errs <- fmt.Errorf("%s handed to %s while %s holds it", a.GetAddress(), o.GetName(), h)
					return
				}
				holder[a.GetAddress()] = o.GetName()
				mu.Unlock()
				// Leave the holder in place for a moment, then forget it
				// before the release: once released, it may be handed on.
				time.Sleep(time.Duration(g%3) * 100 * time.Microsecond)
				mu.Lock()
				delete(holder, a.GetAddress())
				mu.Unlock()
				if _, err := e.client.Release(ctx(t), &allocatorv1.ReleaseRequest{Name: a.GetName(), Etag: a.GetEtag(), OwnerUid: o.GetUid()}); err != nil {
					errs <- err
					return
				}
				r++
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	t.Logf("%d allocations, %d answered POOL_EXHAUSTED", clients*rounds, exhausted.Load())

	// Everything was given back.
	require.Empty(t, listAll(t, e, &allocatorv1.ListAllocationsRequest{Pool: "pools/small", PageSize: 100}))
	p, err := e.client.GetPool(ctx(t), &allocatorv1.GetPoolRequest{Name: "pools/small"})
	require.NoError(t, err)
	require.Equal(t, uint64(0), p.GetPool().GetStats().GetAllocated())
	require.Equal(t, "30", p.GetPool().GetStats().GetFree())
}

// TestWatchResumeInsideOneCommit: a BatchAllocate writes its allocations at
// one revision and the watch sends them one by one. A watcher cut off after
// the first of them and resuming from that event's resume_revision gets all
// of them (the first again); resuming from its revision would miss the rest.
func TestWatchResumeInsideOneCommit(t *testing.T) {
	e := start(t)
	e.createPool(t, "p", poolV4("10.0.0.0/24"))
	wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w, err := e.client.WatchAllocations(wctx, &allocatorv1.WatchAllocationsRequest{Pool: "pools/p"})
	require.NoError(t, err)
	synced := recvUntil(t, w, 1)[0]
	require.Equal(t, allocatorv1.EventType_EVENT_TYPE_SYNCED, synced.GetType())
	require.Equal(t, synced.GetRevision(), synced.GetResumeRevision(), "a snapshot resumes at its own revision")

	var reqs []*allocatorv1.AllocateRequest
	for _, n := range []string{"x", "y", "z"} {
		reqs = append(reqs, &allocatorv1.AllocateRequest{Pool: "pools/p", Owner: pod("ns", n)})
	}
	_, err = e.client.BatchAllocate(ctx(t), &allocatorv1.BatchAllocateRequest{Requests: reqs})
	require.NoError(t, err)
	first := recvUntil(t, w, 1)[0]
	cancel() // cut off after the first event of the commit

	names := func(rs []*allocatorv1.WatchAllocationsResponse) []string {
		var out []string
		for _, r := range rs {
			require.Equal(t, first.GetRevision(), r.GetRevision(), "one commit, one revision")
			out = append(out, r.GetAllocation().GetOwner().GetName())
		}
		slices.Sort(out)
		return out
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()
	resumed, err := e.client.WatchAllocations(rctx, &allocatorv1.WatchAllocationsRequest{Pool: "pools/p", StartRevision: first.GetResumeRevision()})
	require.NoError(t, err)
	require.Equal(t, []string{"x", "y", "z"}, names(recvUntil(t, resumed, 3)), "every allocation of the commit, the one seen included")

	// Resuming from the event's own revision skips the rest of its commit:
	// what resume_revision is for.
	quiet, qcancel := context.WithTimeout(rctx, 200*time.Millisecond)
	defer qcancel()
	skipped, err := e.client.WatchAllocations(quiet, &allocatorv1.WatchAllocationsRequest{Pool: "pools/p", StartRevision: first.GetRevision()})
	require.NoError(t, err)
	_, err = skipped.Recv()
	requireCode(t, err, codes.DeadlineExceeded)
}

// TestWatchFromFutureRevision: a start_revision after the store's current
// revision is refused (OUT_OF_RANGE, REVISION_IN_FUTURE, the current
// revision named), where it used to open a stream that delivered nothing,
// not even later changes; the current revision itself is a valid start.
func TestWatchFromFutureRevision(t *testing.T) {
	e := start(t)
	e.createPool(t, "p", poolV4("10.0.0.0/24"))
	cur := e.allocate(t, "p", pod("ns", "a")).GetRevision()

	wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, rev := range []int64{cur + 1, 999999999999} {
		stream, err := e.client.WatchAllocations(wctx, &allocatorv1.WatchAllocationsRequest{Pool: "pools/p", StartRevision: rev})
		require.NoError(t, err)
		_, err = stream.Recv()
		requireStatus(t, err, codes.OutOfRange, "REVISION_IN_FUTURE", "")
		require.Contains(t, status.Convert(err).Message(), fmt.Sprintf("current revision %d", cur))
	}

	stream, err := e.client.WatchAllocations(wctx, &allocatorv1.WatchAllocationsRequest{Pool: "pools/p", StartRevision: cur})
	require.NoError(t, err)
	b := e.allocate(t, "p", pod("ns", "b"))
	got := recvUntil(t, stream, 1)
	require.Equal(t, b.GetAddress(), got[0].GetAllocation().GetAddress(), "a watch from the current revision gets what comes after it")
}

package upgrade

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	"github.com/plexusnet/plexus/internal/testing/kubetest"
	"github.com/plexusnet/plexus/internal/testing/proctest"
)

// etcdAllocator runs b's allocator on the etcd at endpoint, serving on
// the addresses of opts (free ones without).
func etcdAllocator(t *testing.T, b *Build, endpoint string, opts ...proctest.Option) *proctest.Proc {
	t.Helper()
	return proctest.Start(t, b.Allocator, []string{"--store", "etcd:" + endpoint, "--etcd-prefix", "/upgrade/", "--drain-timeout", "5s"}, opts...)
}

// rollingLoad is 64 clients allocating against two replicas (even
// workers the first, odd the second), releasing every fourth address they
// got, and retrying a call only when it fails with UNAVAILABLE.
type rollingLoad struct {
	clients [2]allocatorv1.AllocatorServiceClient
	phase   atomic.Int32
	// stop ends the workers after the call they are in: every call
	// they began is answered, so what the store holds is what they
	// know of.
	stop atomic.Bool
	// acks counts the acknowledged calls of each phase.
	acks    [3]atomic.Int64
	retries atomic.Int64

	mu sync.Mutex
	// held is who holds each address by what was acknowledged: added on
	// an acknowledged Allocate, removed before its Release is sent.
	held map[string]*allocatorv1.Allocation
}

const workers = 64

// run is one worker until stop; it returns the first error a call
// ended with other than UNAVAILABLE, or two owners holding one address.
func (l *rollingLoad) run(ctx context.Context, w int) error {
	c := l.clients[w%2]
	for i := 0; !l.stop.Load(); i++ {
		name := fmt.Sprintf("w%d-%d", w, i)
		owner := &allocatorv1.Owner{Cluster: []string{"a", "b", "c"}[w%3], Kind: "Pod", Namespace: "load", Name: name, Uid: "uid-" + name}
		var resp *allocatorv1.AllocateResponse
		err := l.retry(ctx, func(ctx context.Context) (err error) {
			resp, err = c.Allocate(ctx, &allocatorv1.AllocateRequest{Pool: "pools/load", Owner: owner})
			return err
		})
		if err != nil {
			return l.failed("allocate "+name, err)
		}
		a := resp.GetAllocation()
		l.mu.Lock()
		other, dup := l.held[a.GetAddress()]
		l.held[a.GetAddress()] = a
		l.mu.Unlock()
		if dup && other.GetOwner().GetUid() != owner.GetUid() {
			return fmt.Errorf("%s held by %s and %s at once", a.GetAddress(), other.GetOwner().GetName(), name)
		}
		l.acks[l.phase.Load()].Add(1)
		if i%4 != 3 {
			continue
		}
		l.mu.Lock()
		delete(l.held, a.GetAddress())
		l.mu.Unlock()
		// By name and uid, missing allowed: safe to send again.
		err = l.retry(ctx, func(ctx context.Context) error {
			_, err := c.Release(ctx, &allocatorv1.ReleaseRequest{Name: a.GetName(), OwnerUid: owner.GetUid(), AllowMissing: true})
			return err
		})
		if err != nil {
			return l.failed("release "+name, err)
		}
		l.acks[l.phase.Load()].Add(1)
	}
	return nil
}

func (l *rollingLoad) failed(what string, err error) error {
	return fmt.Errorf("%s: %w", what, err)
}

// retry calls f until it succeeds or fails with another code than
// UNAVAILABLE, waiting a little longer after each UNAVAILABLE.
func (l *rollingLoad) retry(ctx context.Context, f func(context.Context) error) error {
	backoff := 10 * time.Millisecond
	for {
		callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := f(callCtx)
		cancel()
		if status.Code(err) != codes.Unavailable {
			return err
		}
		l.retries.Add(1)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff + rand.N(backoff)):
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// TestRollingUpgradeOnEtcd: two allocator replicas of the release on one
// etcd serve 64 clients; replica 1 is replaced by this tree's build, then
// replica 2, while the clients allocate and release. No call fails other
// than UNAVAILABLE (retried), no address is held by two owners, and every
// acknowledged allocation is listed afterwards by both replicas with its
// owner, and nothing else is.
func TestRollingUpgradeOnEtcd(t *testing.T) {
	rel, cur := release(t), current(t)
	etcd := kubetest.StartEtcd(t)
	endpoint := etcd.Endpoints()[0]
	replicas := []*proctest.Proc{etcdAllocator(t, rel, endpoint), etcdAllocator(t, rel, endpoint)}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	l := &rollingLoad{held: map[string]*allocatorv1.Allocation{}}
	for i, r := range replicas {
		l.clients[i] = allocClient(t, r.GRPCAddr, "")
	}
	_, err := l.clients[0].CreatePool(ctx, &allocatorv1.CreatePoolRequest{PoolId: "load", Pool: &allocatorv1.Pool{Cidrs: []string{"10.40.0.0/16", "10.41.0.0/16"}}})
	require.NoError(t, err)

	defer l.stop.Store(true)
	errs := make(chan error, workers)
	for w := range workers {
		go func() { errs <- l.run(ctx, w) }()
	}
	// waitAcks waits until the load has had n calls acknowledged in the
	// current phase, or a worker failed.
	waitAcks := func(n int64, what string) {
		t.Helper()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for l.acks[l.phase.Load()].Load() < n {
			select {
			case err := <-errs:
				t.Fatalf("%s: a client failed: %v", what, err)
			case <-ctx.Done():
				t.Fatalf("%s: only %d calls acknowledged", what, l.acks[l.phase.Load()].Load())
			case <-tick.C:
			}
		}
	}
	waitAcks(300, "both replicas of "+rel.Name)
	for i := range replicas {
		// Replace replica i: stop it (SIGTERM, drain), start this tree's
		// build on its addresses.
		replicas[i].Stop()
		replicas[i] = etcdAllocator(t, cur, endpoint, proctest.WithAddrs(replicas[i].GRPCAddr, replicas[i].HTTPAddr))
		l.phase.Add(1)
		waitAcks(300, fmt.Sprintf("after replica %d runs %s", i+1, cur.Name))
	}
	l.stop.Store(true)
	for range workers {
		require.NoError(t, <-errs)
	}
	var total int64
	for i := range l.acks {
		total += l.acks[i].Load()
	}
	t.Logf("%d calls acknowledged over the upgrade (%d, %d, %d by phase); %d UNAVAILABLE retried",
		total, l.acks[0].Load(), l.acks[1].Load(), l.acks[2].Load(), l.retries.Load())

	// Every acknowledged allocation, with its owner, and nothing else.
	for i, c := range l.clients {
		listed := map[string]string{}
		for _, a := range listAllocations(ctx, t, c, "pools/load") {
			listed[a.GetAddress()] = a.GetOwner().GetUid()
		}
		want := map[string]string{}
		for addr, a := range l.held {
			want[addr] = a.GetOwner().GetUid()
		}
		require.Equal(t, want, listed, "replica %d (%s) lists what was acknowledged", i+1, cur.Name)
	}
	require.False(t, errors.Is(ctx.Err(), context.DeadlineExceeded), "the test ran out of time")
}

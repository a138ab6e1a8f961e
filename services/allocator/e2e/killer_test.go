package e2e_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	"github.com/plexusnet/plexus/internal/dial"
	"github.com/plexusnet/plexus/internal/testing/kubetest"
)

// replicaSet is a set of allocator replicas on one etcd whose members a
// killer replaces while clients use them.
type replicaSet struct {
	t     *testing.T
	args  []string
	mu    sync.Mutex
	procs []*allocator
	conns []*grpc.ClientConn
}

func (rs *replicaSet) start(i int) {
	a, err := launch(rs.args...)
	require.NoError(rs.t, err)
	conn, err := dial.New(a.grpcAddr, dial.WithoutRetry())
	require.NoError(rs.t, err)
	rs.mu.Lock()
	rs.procs[i], rs.conns[i] = a, conn
	rs.mu.Unlock()
}

// client returns a client of replica i, as it is now.
func (rs *replicaSet) client(i int) allocatorv1.AllocatorServiceClient {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return allocatorv1.NewAllocatorServiceClient(rs.conns[i])
}

func (rs *replicaSet) kill(i int) {
	rs.mu.Lock()
	a, conn := rs.procs[i], rs.conns[i]
	rs.mu.Unlock()
	a.kill()
	_ = conn.Close()
}

// history is what the clients were told, checked as it is recorded: an
// address is never acknowledged to an owner while another owner holds it
// (acknowledged and not released), and a retried request (same request_id)
// never gets a second address.
type history struct {
	mu      sync.Mutex
	holder  map[string]string // address → owner
	address map[string]string // owner → address
	acks    int
	retried int
}

func (h *history) allocated(owner, addr string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if prev, ok := h.address[owner]; ok {
		if prev != addr {
			return fmt.Errorf("owner %s got a second address on a retry: %s, then %s", owner, prev, addr)
		}
		return nil
	}
	if other, taken := h.holder[addr]; taken {
		return fmt.Errorf("%s acknowledged to %s while %s holds it", addr, owner, other)
	}
	h.holder[addr], h.address[owner] = owner, addr
	h.acks++
	return nil
}

// releasing forgets an owner's address before the release is sent: from
// then on the address may go to someone else.
func (h *history) releasing(owner string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.holder, h.address[owner])
	delete(h.address, owner)
}

// violations collects what the client goroutines saw go wrong; the test
// goroutine reports them (FailNow may not run on another goroutine).
type violations struct {
	mu   sync.Mutex
	list []string
}

func (v *violations) add(format string, args ...any) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.list = append(v.list, fmt.Sprintf(format, args...))
}

func (v *violations) report(t *testing.T) {
	t.Helper()
	v.mu.Lock()
	defer v.mu.Unlock()
	for i, s := range v.list {
		if i == 20 {
			t.Errorf("and %d more", len(v.list)-i)
			break
		}
		t.Error(s)
	}
	if len(v.list) > 0 {
		t.FailNow()
	}
}

// mayHaveCommitted tells whether a call that failed with err may all the
// same have taken effect: the reply was lost, or the replica died, while
// its write was on the way.
func mayHaveCommitted(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Unknown, codes.Internal, codes.Aborted:
		return true
	}
	return false
}

// errFinal ends call's retries: the answer is wrong, not unavailable.
type errFinal struct{ error }

// TestReplicasSurviveKills: three allocator replicas on one etcd, 64
// clients spread over them, one replica SIGKILLed and started again every
// 3 s for 60 s. A call that fails is retried on another replica with the
// same request_id until it is answered. No address is ever held by two
// owners, no retry gets a second address, no acknowledged allocation is
// lost (a client releases what it holds without allow_missing, and
// NOT_FOUND is a violation unless an earlier attempt of that release
// failed in a way that may have committed), in the end the replicas agree with each other and with what the
// clients were told, and the recorded history of allocations, releases
// and reads (a quarter of the allocations and releases is read back
// through another replica) is linearizable (porcupine, with the model in
// linearizable_test.go).
func TestReplicasSurviveKills(t *testing.T) {
	const (
		replicas = 3
		clients  = 64
		runFor   = 60 * time.Second
		every    = 3 * time.Second
	)
	e := kubetest.StartEtcd(t)
	rs := &replicaSet{t: t, args: []string{"--store=etcd:" + e.Endpoints()[0]}, procs: make([]*allocator, replicas), conns: make([]*grpc.ClientConn, replicas)}
	for i := range replicas {
		rs.start(i)
	}
	t.Cleanup(func() {
		for i := range replicas {
			rs.kill(i)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), runFor+2*time.Minute)
	defer cancel()
	_, err := rs.client(0).CreatePool(ctx, &allocatorv1.CreatePoolRequest{PoolId: "p", Pool: &allocatorv1.Pool{Cidrs: []string{"10.20.0.0/22"}}})
	require.NoError(t, err)
	for i := 1; i < replicas; i++ {
		require.Eventually(t, func() bool {
			_, err := rs.client(i).GetPool(ctx, &allocatorv1.GetPoolRequest{Name: "pools/p"})
			return err == nil
		}, 10*time.Second, 20*time.Millisecond)
	}

	h := &history{holder: map[string]string{}, address: map[string]string{}}
	lin := newLinHistory()
	var bad violations
	var failures, ambiguousReleases atomic.Int64
	// call retries fn on one replica after another until it is answered,
	// fn returns errFinal, or the test's time is up.
	call := func(id int, fn func(c allocatorv1.AllocatorServiceClient) error) error {
		for attempt := 0; ; attempt++ {
			err := fn(rs.client((id + attempt) % replicas))
			if err == nil {
				return nil
			}
			if f, ok := err.(errFinal); ok {
				return f.error
			}
			failures.Add(1)
			if ctx.Err() != nil {
				return fmt.Errorf("gave up retrying: %w", err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// read asks a replica other than the one the client tried first who
	// holds addr, and records the answer.
	read := func(c int, addr string) bool {
		var holder string
		start := lin.now()
		err := call(c+1, func(cl allocatorv1.AllocatorServiceClient) error {
			cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
			defer ccancel()
			resp, err := cl.GetAllocation(cctx, &allocatorv1.GetAllocationRequest{Name: "pools/p/allocations/" + addr})
			if status.Code(err) == codes.NotFound {
				holder = ""
				return nil
			}
			holder = resp.GetAllocation().GetOwner().GetName()
			return err
		})
		if err != nil {
			bad.add("client %d: get %s: %v", c, addr, err)
			return false
		}
		lin.add(c, linOp{get: true, owner: holder, addr: addr}, start)
		return true
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			type holding struct{ owner, addr string }
			var held []holding
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				if len(held) > 4 || (len(held) > 0 && rng.IntN(3) == 0) {
					r := held[0]
					held = held[1:]
					h.releasing(r.owner)
					start := lin.now()
					// The client holds r: releasing it must find it,
					// unless an earlier attempt may have released it
					// already. The owner uid guard makes the retry safe.
					ambiguous := false
					err := call(c, func(cl allocatorv1.AllocatorServiceClient) error {
						cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
						defer ccancel()
						resp, err := cl.Release(cctx, &allocatorv1.ReleaseRequest{Pool: "pools/p", Owner: owner4(r.owner), OwnerUid: "u-" + r.owner})
						switch {
						case err == nil:
							if got := resp.GetAllocation().GetAddress(); got != r.addr {
								return errFinal{fmt.Errorf("release of %s (holding %s) released %q", r.owner, r.addr, got)}
							}
							return nil
						case status.Code(err) == codes.NotFound && ambiguous:
							ambiguousReleases.Add(1)
							return nil // an earlier attempt freed it
						case status.Code(err) == codes.NotFound:
							return errFinal{fmt.Errorf("release of %s (holding %s, no earlier attempt): %w", r.owner, r.addr, err)}
						case mayHaveCommitted(err):
							ambiguous = true
							return err
						}
						return errFinal{fmt.Errorf("release of %s (holding %s): %w", r.owner, r.addr, err)}
					})
					if err != nil {
						bad.add("client %d: %v", c, err)
						return
					}
					lin.add(c, linOp{release: true, owner: r.owner, addr: r.addr}, start)
					if rng.IntN(4) == 0 && !read(c, r.addr) {
						return
					}
					continue
				}
				owner := fmt.Sprintf("c%d-%d", c, n)
				var addr string
				tries := 0
				start := lin.now()
				err := call(c, func(cl allocatorv1.AllocatorServiceClient) error {
					tries++
					cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
					defer ccancel()
					resp, err := cl.Allocate(cctx, &allocatorv1.AllocateRequest{Pool: "pools/p", Owner: owner4(owner), RequestId: "req-" + owner})
					addr = resp.GetAllocation().GetAddress()
					return err
				})
				if err != nil {
					bad.add("client %d: allocate %s: %v", c, owner, err)
					return
				}
				if tries > 1 {
					h.mu.Lock()
					h.retried++
					h.mu.Unlock()
				}
				lin.add(c, linOp{owner: owner, addr: addr}, start)
				if err := h.allocated(owner, addr); err != nil {
					bad.add("client %d: %v", c, err)
				}
				held = append(held, holding{owner, addr})
				if rng.IntN(4) == 0 && !read(c, addr) {
					return
				}
			}
		})
	}
	rng := rand.New(rand.NewPCG(42, 42))
	kills := 0
	for deadline := time.Now().Add(runFor); time.Now().Before(deadline); kills++ {
		// The cadence of kills and restarts is the test's load, not a
		// wait for anything.
		time.Sleep(every)
		i := rng.IntN(replicas)
		rs.kill(i)
		time.Sleep(500 * time.Millisecond)
		rs.start(i)
	}
	close(stop)
	wg.Wait()
	bad.report(t)

	// The replicas agree with each other and with the clients.
	want := map[string]string{}
	h.mu.Lock()
	for owner, addr := range h.address {
		want[addr] = owner
	}
	h.mu.Unlock()
	for i := range replicas {
		require.Eventually(t, func() bool {
			list, err := listAll(ctx, rs.client(i), "p")
			if err != nil {
				return false
			}
			got := map[string]string{}
			for _, a := range list {
				got[a.GetAddress()] = a.GetOwner().GetName()
			}
			for addr, owner := range want {
				if got[addr] != owner {
					return false
				}
			}
			return len(got) == len(want)
		}, 30*time.Second, 100*time.Millisecond, "replica %d holds exactly what the clients were told", i)
	}
	t.Logf("%d kills; %d allocations acknowledged, %d of them after a retry; %d failed calls retried; %d releases found nothing after an attempt that may have committed; %d held at the end",
		kills, h.acks, h.retried, failures.Load(), ambiguousReleases.Load(), len(want))
	require.Greater(t, h.retried, 0, "kills interrupted some calls")
	lin.check(t)
}

func owner4(name string) *allocatorv1.Owner {
	return &allocatorv1.Owner{Cluster: "a", Kind: "Pod", Namespace: "ns", Name: name, Uid: "u-" + name}
}

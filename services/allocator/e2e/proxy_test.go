package e2e_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	"github.com/plexusnet/plexus/internal/testing/kubetest"
)

// slowProxy forwards TCP connections on a loopback port to target, each
// chunk in either direction held back by the current delay, replies from
// target by replyDelay on top. It can also drop traffic: cut every
// connection as a partition would and forward nothing until healed.
type slowProxy struct {
	lis         net.Listener
	target      string
	delay       atomic.Int64 // nanoseconds
	replyDelay  atomic.Int64 // nanoseconds
	partitioned atomic.Bool
	// queued counts the chunks read and not yet written on: zero when
	// everything sent through the proxy has arrived.
	queued atomic.Int64
	mu     sync.Mutex
	conns  []net.Conn
}

func startProxy(t *testing.T, target string) *slowProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &slowProxy{lis: lis, target: target}
	go p.serve()
	t.Cleanup(func() {
		_ = lis.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			_ = c.Close()
		}
	})
	return p
}

func (p *slowProxy) addr() string { return p.lis.Addr().String() }

func (p *slowProxy) serve() {
	for {
		in, err := p.lis.Accept()
		if err != nil {
			return
		}
		if p.partitioned.Load() {
			// Nothing gets through: the connection is accepted (the
			// network is not refusing, it is dropping) and goes nowhere.
			p.track(in)
			continue
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = in.Close()
			continue
		}
		p.track(in, out)
		go p.pipe(in, out, false)
		go p.pipe(out, in, true)
	}
}

func (p *slowProxy) track(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conns = append(p.conns, conns...)
}

// cut closes every connection through the proxy.
func (p *slowProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// partition drops all traffic: connections are cut and new ones go
// nowhere until heal.
func (p *slowProxy) partition() {
	p.partitioned.Store(true)
	p.cut()
}

func (p *slowProxy) heal() {
	p.partitioned.Store(false)
	p.cut() // the held connections; the client dials again
}

// pipe copies src to dst, each chunk held back by the delay of the moment
// it was read: the bytes arrive late, in order, as over a link with that
// latency (a chunk does not wait for the delays of the chunks before it).
func (p *slowProxy) pipe(src, dst net.Conn, reply bool) {
	type chunk struct {
		b   []byte
		due time.Time
	}
	chunks := make(chan chunk, 1024)
	go func() {
		defer dst.Close()
		for c := range chunks {
			time.Sleep(time.Until(c.due)) // the slow link the tests are about
			_, err := dst.Write(c.b)
			p.queued.Add(-1)
			if err != nil {
				_ = src.Close()
				for range chunks { // let the reader finish
					p.queued.Add(-1)
				}
				return
			}
		}
	}()
	defer close(chunks)
	for {
		buf := make([]byte, 32<<10)
		n, err := src.Read(buf)
		if n > 0 {
			d := p.delay.Load()
			if reply {
				d += p.replyDelay.Load()
			}
			p.queued.Add(1)
			chunks <- chunk{b: buf[:n], due: time.Now().Add(time.Duration(d))}
		}
		if err != nil {
			return
		}
	}
}

// linked is two allocator replicas on one etcd, A through a proxy and B
// direct, serving pool "p".
type linked struct {
	proxy  *slowProxy
	a      *allocator
	ca, cb allocatorv1.AllocatorServiceClient
}

func startLinked(t *testing.T, cidr string) linked {
	t.Helper()
	e := kubetest.StartEtcd(t)
	direct := e.Endpoints()[0]
	l := linked{proxy: startProxy(t, direct[len("http://"):])}
	l.a = startAllocator(t, "--store=etcd:http://"+l.proxy.addr())
	b := startAllocator(t, "--store=etcd:"+direct)
	l.ca, l.cb = l.a.client(t), b.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := l.cb.CreatePool(ctx, &allocatorv1.CreatePoolRequest{PoolId: "p", Pool: &allocatorv1.Pool{Cidrs: []string{cidr}}})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := l.ca.GetPool(ctx, &allocatorv1.GetPoolRequest{Name: "pools/p"})
		return err == nil
	}, 10*time.Second, 20*time.Millisecond, "A serves the pool created through B")
	return l
}

// warmRequestLease makes one allocation with a request_id through c, so
// that the replica has granted the etcd lease its request records share
// (granted lazily, on the first such commit, and reused for an hour): a
// later request then needs one read and one transaction, not a lease
// grant on top.
func warmRequestLease(t *testing.T, ctx context.Context, c allocatorv1.AllocatorServiceClient) {
	t.Helper()
	_, err := c.Allocate(ctx, &allocatorv1.AllocateRequest{Pool: "pools/p", Owner: owner4("warm-up"), RequestId: "req-warm-up"})
	require.NoError(t, err)
}

// ownerHolds lists, through c, the addresses owner holds in pool p.
func ownerHolds(ctx context.Context, c allocatorv1.AllocatorServiceClient, owner string) ([]string, error) {
	list, err := c.ListAllocations(ctx, &allocatorv1.ListAllocationsRequest{Pool: "pools/p", OwnerName: owner})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, al := range list.GetAllocations() {
		out = append(out, al.GetAddress())
	}
	return out, nil
}

// TestRetryWithRequestIDAcrossASlowLink: replica A reaches etcd through a
// proxy that starts holding every packet back; a client's Allocate on A
// times out while its commit may still be on its way. Retried with the
// same request_id on replica B (and later on A again), the client gets one
// address — the one committed, if the first attempt's commit landed — and
// the owner never holds two.
//
// Whether the first attempt commits is a matter of timing. An Allocate
// with a request_id first reads the request record (one round trip, 2×
// the delay) and then sends its transaction (in etcd after 3× the delay,
// answered after 4×). A client that gives up before the read is answered
// leaves nothing behind (the first rounds); one that gives up between 2×
// and 4× the delay usually leaves a commit that lands after it gave up.
// Rounds of that second kind repeat until one did, and the test requires
// that it happened: both cases are covered, every round checked the same.
func TestRetryWithRequestIDAcrossASlowLink(t *testing.T) {
	l := startLinked(t, "10.30.0.0/24")
	proxy, ca, cb := l.proxy, l.ca, l.cb
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	warmRequestLease(t, ctx, ca)

	type round struct{ delay, timeout time.Duration }
	rounds := []round{{300 * time.Millisecond, 200 * time.Millisecond}, {800 * time.Millisecond, 200 * time.Millisecond}}
	for range 4 {
		rounds = append(rounds, round{300 * time.Millisecond, 750 * time.Millisecond}, round{600 * time.Millisecond, 1500 * time.Millisecond})
	}
	committedLate, notCommitted := 0, 0
	for i, r := range rounds {
		if i >= 2 && committedLate > 0 {
			break
		}
		owner := &allocatorv1.Owner{Cluster: "a", Kind: "Pod", Namespace: "ns", Name: fmt.Sprint("slow-", i), Uid: fmt.Sprint("u", i)}
		req := &allocatorv1.AllocateRequest{Pool: "pools/p", Owner: owner, RequestId: fmt.Sprint("req-slow-", i)}
		proxy.delay.Store(int64(r.delay))
		cctx, ccancel := context.WithTimeout(ctx, r.timeout)
		_, err := ca.Allocate(cctx, req)
		ccancel()
		require.Error(t, err, "the call through the slow link times out")
		// The timing under test: a commit that was on its way lands (or
		// not) before the retry. No assertion waits on it: whichever way
		// the round went, the checks below hold.
		time.Sleep(4 * r.delay)
		held, err := ownerHolds(ctx, cb, owner.GetName())
		require.NoError(t, err)
		require.LessOrEqual(t, len(held), 1, "the owner holds at most one address")

		resp, err := cb.Allocate(ctx, req)
		require.NoError(t, err)
		got := resp.GetAllocation().GetAddress()
		if len(held) == 1 {
			committedLate++
			require.Equal(t, held[0], got, "the retry gets the address the timed-out attempt committed")
			require.False(t, resp.GetCreated(), "the retry is answered with the first attempt's allocation")
		} else {
			notCommitted++
		}
		proxy.delay.Store(0)
		require.Eventually(t, func() bool {
			again, err := ca.Allocate(ctx, req)
			return err == nil && again.GetAllocation().GetAddress() == got
		}, 20*time.Second, 50*time.Millisecond, "a retry on A, once its link is well, gets the same address")
		for _, c := range []allocatorv1.AllocatorServiceClient{ca, cb} {
			require.Eventually(t, func() bool {
				held, err := ownerHolds(ctx, c, owner.GetName())
				return err == nil && slices.Equal(held, []string{got})
			}, 20*time.Second, 50*time.Millisecond, "the owner holds one address, the one the retry returned")
		}
	}
	t.Logf("%d rounds where the timed-out attempt committed, %d where it did not", committedLate, notCommitted)
	require.Positive(t, committedLate, "in some round the timed-out attempt on A committed after its client gave up")
	require.Positive(t, notCommitted, "in some round the timed-out attempt on A left nothing behind")
}

// TestSameRequestOnTwoReplicasAtOnce: the same Allocate (same owner, same
// request_id) goes at once to replica A, whose link to etcd is slow, and
// to replica B, B's copy sent a little later or not, so that B's commit
// lands before A reads the request record, between A's read and A's
// transaction, at about the same moment as A's transaction, or after it.
// Every answer that succeeds carries the same address, at most one says
// it created the allocation, and the owner holds exactly that one address
// afterwards, as read through B and, once its link is well, through A.
func TestSameRequestOnTwoReplicasAtOnce(t *testing.T) {
	l := startLinked(t, "10.32.0.0/24")
	proxy, ca, cb := l.proxy, l.ca, l.cb
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	warmRequestLease(t, ctx, ca)

	type answer struct {
		replica string
		addr    string
		created bool
		err     error
	}
	want := map[string]string{} // owner → the one address
	bothAnswered := 0
	createdBy := map[string]int{} // which replica's commit won, over the rounds
	round := 0
	for _, delay := range []time.Duration{30 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond} {
		// B's copy goes out this many delays after A's: A's read of the
		// request record is in etcd after 1, answered after 2; its
		// transaction is in etcd after 3.
		for _, lag := range []float64{0, 1.5, 2.5, 3, 3.5, 5} {
			round++
			name := fmt.Sprint("twice-", round)
			req := &allocatorv1.AllocateRequest{Pool: "pools/p", Owner: owner4(name), RequestId: "req-" + name}
			proxy.delay.Store(int64(delay))
			answers := make(chan answer, 2)
			send := func(replica string, c allocatorv1.AllocatorServiceClient, after time.Duration) {
				time.Sleep(after)
				cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
				defer ccancel()
				resp, err := c.Allocate(cctx, req)
				answers <- answer{replica, resp.GetAllocation().GetAddress(), resp.GetCreated(), err}
			}
			go send("A", ca, 0)
			go send("B", cb, time.Duration(lag*float64(delay)))
			var addrs []string
			created := 0
			for range 2 {
				a := <-answers
				if a.err != nil {
					t.Logf("round %d (delay %s, B %.1f delays later): %s failed: %v", round, delay, lag, a.replica, a.err)
					continue
				}
				addrs = append(addrs, a.addr)
				if a.created {
					created++
					createdBy[a.replica]++
				}
			}
			proxy.delay.Store(0)
			require.NotEmpty(t, addrs, "round %d: one of the replicas answers", round)
			if len(addrs) == 2 {
				bothAnswered++
			}
			require.Len(t, slices.Compact(slices.Clone(addrs)), 1, "round %d (delay %s, B %.1f delays later): both answers carry one address: %v", round, delay, lag, addrs)
			require.LessOrEqual(t, created, 1, "round %d: at most one answer says it created the allocation", round)
			held, err := ownerHolds(ctx, cb, name)
			require.NoError(t, err)
			require.Equal(t, addrs[:1], held, "round %d: the owner holds exactly the address answered, read through B", round)
			want[name] = addrs[0]
		}
	}
	for name, addr := range want {
		require.Eventually(t, func() bool {
			held, err := ownerHolds(ctx, ca, name)
			return err == nil && slices.Equal(held, []string{addr})
		}, 20*time.Second, 50*time.Millisecond, "%s holds exactly %s, read through A", name, addr)
	}
	t.Logf("%d rounds, both replicas answered in %d; the allocation was made by A in %d, by B in %d", round, bothAnswered, createdBy["A"], createdBy["B"])
	require.Greater(t, bothAnswered, round/2, "most rounds got an answer from both replicas")
	// Both orders happened: the race was a race.
	require.Positive(t, createdBy["A"], "in some round A's commit won")
	require.Positive(t, createdBy["B"], "in some round B's commit won")
}

// TestRetryAfterDroppedTraffic: replica A reaches etcd through a proxy.
// First etcd's replies to A come late: A's transaction commits, but the
// client's call times out before A hears so. The retry with the same
// request_id on replica B returns the address that was committed. Then A is
// cut off from etcd entirely: it reports NOT_SERVING, calls on it fail, a
// retry on B gets an address; once the link heals, A serves again by itself
// and returns the same answers. No owner ever holds two addresses.
func TestRetryAfterDroppedTraffic(t *testing.T) {
	l := startLinked(t, "10.31.0.0/24")
	proxy, a, ca, cb := l.proxy, l.a, l.ca, l.cb
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	owns := func(c allocatorv1.AllocatorServiceClient, owner string) []string {
		list, err := c.ListAllocations(ctx, &allocatorv1.ListAllocationsRequest{Pool: "pools/p", OwnerName: owner})
		if err != nil {
			return nil
		}
		var out []string
		for _, al := range list.GetAllocations() {
			out = append(out, al.GetAddress())
		}
		return out
	}

	// 1. Replies late: A reads the request id (its reply, late, still
	// comes in time), commits, and the commit's reply comes after the
	// client gave up. Timing decides whether a round ends that way, so
	// rounds repeat until one does; every round's retry must agree with
	// what was committed.
	proxy.replyDelay.Store(int64(300 * time.Millisecond))
	var lost *allocatorv1.AllocateRequest
	var committed []string
	for round := 0; round < 8 && lost == nil; round++ {
		req := &allocatorv1.AllocateRequest{Pool: "pools/p", Owner: owner4(fmt.Sprint("late-", round)), RequestId: fmt.Sprint("req-late-", round)}
		handled := allocateHandled(a)
		cctx, ccancel := context.WithTimeout(ctx, 500*time.Millisecond)
		_, err := ca.Allocate(cctx, req)
		ccancel()
		// Once A's server is done with the call (answered, in time or not)
		// and the proxy has delivered all it was given, a commit A sent has
		// reached etcd, or A sent none; every check below holds both ways.
		require.Eventually(t, func() bool {
			return allocateHandled(a) > handled && proxy.queued.Load() == 0
		}, 20*time.Second, 5*time.Millisecond, "A finishes the call and the link goes quiet")
		held := owns(cb, req.GetOwner().GetName())
		resp, rerr := cb.Allocate(ctx, req)
		require.NoError(t, rerr)
		require.LessOrEqual(t, len(held), 1)
		if len(held) == 1 {
			require.Equal(t, held[0], resp.GetAllocation().GetAddress(), "the retry gets the committed address")
			if err != nil {
				lost, committed = req, held
			}
		}
		require.Equal(t, []string{resp.GetAllocation().GetAddress()}, owns(cb, req.GetOwner().GetName()), "the owner holds one address")
	}
	proxy.replyDelay.Store(0)
	require.NotNil(t, lost, "in some round A committed while its client had already timed out")

	// 2. Partition: A cannot reach etcd at all.
	proxy.partition()
	health := healthpb.NewHealthClient(a.conn(t))
	require.Eventually(t, func() bool {
		hctx, hcancel := context.WithTimeout(ctx, time.Second)
		defer hcancel()
		st, err := health.Check(hctx, &healthpb.HealthCheckRequest{Service: allocatorv1.AllocatorService_ServiceDesc.ServiceName})
		return err == nil && st.GetStatus() == healthpb.HealthCheckResponse_NOT_SERVING
	}, 30*time.Second, 100*time.Millisecond, "A reports NOT_SERVING while etcd is unreachable")
	cut := &allocatorv1.AllocateRequest{Pool: "pools/p", Owner: owner4("partitioned"), RequestId: "req-partitioned"}
	cctx, ccancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err := ca.Allocate(cctx, cut)
	ccancel()
	require.Error(t, err, "A cannot allocate without etcd")
	resp, err := cb.Allocate(ctx, cut)
	require.NoError(t, err)
	got := resp.GetAllocation().GetAddress()

	proxy.heal()
	require.Eventually(t, func() bool {
		hctx, hcancel := context.WithTimeout(ctx, time.Second)
		defer hcancel()
		st, err := health.Check(hctx, &healthpb.HealthCheckRequest{Service: allocatorv1.AllocatorService_ServiceDesc.ServiceName})
		return err == nil && st.GetStatus() == healthpb.HealthCheckResponse_SERVING
	}, 60*time.Second, 100*time.Millisecond, "A serves again once the link heals")
	for req, want := range map[*allocatorv1.AllocateRequest]string{lost: committed[0], cut: got} {
		again, err := ca.Allocate(ctx, req)
		require.NoError(t, err)
		require.Equal(t, want, again.GetAllocation().GetAddress(), "A answers %s's retry with the same address", req.GetOwner().GetName())
		for _, c := range []allocatorv1.AllocatorServiceClient{ca, cb} {
			require.Equal(t, []string{want}, owns(c, req.GetOwner().GetName()), "the owner holds one address")
		}
	}
}

// allocateHandled is how many Allocate calls the allocator's server has
// finished, by its grpc_server_handled_total; -1 while /metrics does not
// answer. It fails nothing, so conditions that poll may call it.
func allocateHandled(a *allocator) float64 {
	resp, err := http.Get("http://" + a.httpAddr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return -1
	}
	sum := 0.0
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "grpc_server_handled_total{") || !strings.Contains(line, `grpc_method="Allocate"`) {
			continue
		}
		if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
			sum += v
		}
	}
	return sum
}

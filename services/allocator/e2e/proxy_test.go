package e2e_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	allocatorv1 "github.com/plexusnet/plexus/clients/go/plexus/allocator/v1"
	"github.com/plexusnet/plexus/internal/kubetest"
)

// slowProxy forwards TCP connections on a loopback port to target, each
// chunk in either direction held back by the current delay.
type slowProxy struct {
	lis    net.Listener
	target string
	delay  atomic.Int64 // nanoseconds
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
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = in.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, in, out)
		p.mu.Unlock()
		go p.pipe(in, out)
		go p.pipe(out, in)
	}
}

// pipe copies src to dst, each read held back by the delay of the moment
// it was read: the bytes arrive late, in order.
func (p *slowProxy) pipe(src, dst net.Conn) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			time.Sleep(time.Duration(p.delay.Load()))
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				_ = src.Close()
			}
			return
		}
	}
}

// TestRetryWithRequestIDAcrossASlowLink: replica A reaches etcd through a
// proxy that starts holding every packet back; a client's Allocate on A
// times out while its commit may still be on its way. Retried with the
// same request_id on replica B (and later on A again), the client gets one
// address — the one committed, if the first attempt's commit landed — and
// the owner never holds two.
func TestRetryWithRequestIDAcrossASlowLink(t *testing.T) {
	e := kubetest.StartEtcd(t)
	direct := e.Endpoints()[0]
	proxy := startProxy(t, direct[len("http://"):])
	a := startAllocator(t, "--store=etcd:http://"+proxy.addr())
	b := startAllocator(t, "--store=etcd:"+direct)
	ca, cb := a.client(t), b.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := cb.CreatePool(ctx, &allocatorv1.CreatePoolRequest{PoolId: "p", Pool: &allocatorv1.Pool{Cidrs: []string{"10.30.0.0/24"}}})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := ca.GetPool(ctx, &allocatorv1.GetPoolRequest{Name: "pools/p"})
		return err == nil
	}, 10*time.Second, 20*time.Millisecond)

	for round, delay := range []time.Duration{300 * time.Millisecond, 800 * time.Millisecond} {
		owner := &allocatorv1.Owner{Cluster: "a", Kind: "Pod", Namespace: "ns", Name: fmt.Sprint("slow-", round), Uid: fmt.Sprint("u", round)}
		req := &allocatorv1.AllocateRequest{Pool: "pools/p", Owner: owner, RequestId: fmt.Sprint("req-slow-", round)}
		proxy.delay.Store(int64(delay))
		cctx, ccancel := context.WithTimeout(ctx, 200*time.Millisecond)
		_, err := ca.Allocate(cctx, req)
		ccancel()
		require.Error(t, err, "the call through the slow link times out")
		// Let a commit that was on its way land (or not) before the retry.
		time.Sleep(2 * delay)

		resp, err := cb.Allocate(ctx, req)
		require.NoError(t, err)
		got := resp.GetAllocation().GetAddress()
		proxy.delay.Store(0)
		require.Eventually(t, func() bool {
			again, err := ca.Allocate(ctx, req)
			return err == nil && again.GetAllocation().GetAddress() == got
		}, 20*time.Second, 50*time.Millisecond, "a retry on A, once its link is well, gets the same address")
		for _, c := range []allocatorv1.AllocatorServiceClient{ca, cb} {
			require.Eventually(t, func() bool {
				list, err := c.ListAllocations(ctx, &allocatorv1.ListAllocationsRequest{Pool: "pools/p", OwnerName: owner.GetName()})
				return err == nil && len(list.GetAllocations()) == 1 && list.GetAllocations()[0].GetAddress() == got
			}, 20*time.Second, 50*time.Millisecond, "the owner holds one address, the one the retry returned")
		}
	}
}

package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bbolt "go.etcd.io/bbolt"
	"google.golang.org/grpc"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	"github.com/plexusnet/plexus/internal/dial"
	"github.com/plexusnet/plexus/services/allocator/store/bolt"
)

const (
	crashRounds  = 20
	crashClients = 32
	// crashBudget bounds the whole test; a round takes well under a
	// second on a loaded two-core machine.
	crashBudget = 90 * time.Second
	crashPool   = "crash"
)

// ledger is what the clients were told, across every round.
type ledger struct {
	mu sync.Mutex
	// acked: owner name -> address, for allocations acknowledged and not
	// released since.
	acked map[string]string
	// released: owners whose release was acknowledged.
	released map[string]bool
	// unsure: owners whose call (allocate or release) got no answer
	// because the process died: either outcome is right.
	unsure map[string]bool
}

func (l *ledger) ack(owner, addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acked[owner] = addr
}

func (l *ledger) ackRelease(owner string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.acked, owner)
	l.released[owner] = true
}

func (l *ledger) lost(owner string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.unsure[owner] = true
}

func (l *ledger) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

// TestCrashSafety kills the allocator with SIGKILL while 32 clients
// allocate (and now and then release), restarts it on the same bolt file,
// and checks after every restart that every acknowledged allocation is
// there, no acknowledged release came back, nothing appeared that no
// client asked for, no address or owner is held twice, and the file
// passes bbolt's consistency check.
func TestCrashSafety(t *testing.T) {
	deadline := time.Now().Add(crashBudget)
	db := filepath.Join(t.TempDir(), "allocator.db")
	l := &ledger{acked: map[string]string{}, released: map[string]bool{}, unsure: map[string]bool{}}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))

	for round := range crashRounds {
		require.True(t, time.Now().Before(deadline), "crash test over its time budget after %d rounds", round)
		a := startAllocator(t, "--store=bolt:"+db)
		c := a.client(t)
		if round == 0 {
			_, err := c.CreatePool(callCtx(t), &allocatorv1.CreatePoolRequest{PoolId: crashPool, Pool: &allocatorv1.Pool{Cidrs: []string{"10.64.0.0/12"}}})
			require.NoError(t, err)
		} else {
			verify(t, c, l, round)
		}

		before := l.size()
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var acks atomic.Int64
		conns := dialN(t, a.grpcAddr, 4)
		for i := range crashClients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				crashClient(allocatorv1.NewAllocatorServiceClient(conns[i%len(conns)]), l, &acks, stop, round, i)
			}()
		}
		// Kill at a random moment once the clients are well under way.
		waitUntil(t, func() bool { return acks.Load() >= crashClients }, 20*time.Second)
		time.Sleep(time.Duration(rng.IntN(250)) * time.Millisecond)
		a.kill()
		close(stop)
		wg.Wait()
		t.Logf("round %d: %d acknowledged allocations before the kill, %d in total", round, acks.Load(), l.size())
		require.Greater(t, l.size()+len(l.released), before, "round %d acknowledged nothing", round)

		checkFile(t, db, l)
	}

	// A last restart, then a graceful stop, which must exit cleanly.
	a := startAllocator(t, "--store=bolt:"+db)
	verify(t, a.client(t), l, crashRounds)
	require.NoError(t, a.stop(20*time.Second))
}

func dialN(t *testing.T, addr string, n int) []*grpc.ClientConn {
	t.Helper()
	out := make([]*grpc.ClientConn, n)
	for i := range out {
		conn, err := dial.New(addr, dial.WithoutRetry())
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close() })
		out[i] = conn
	}
	return out
}

// crashClient allocates for fresh owners until the process dies or stop
// closes; every fourth acknowledged allocation it releases again, guarded
// by etag and uid.
func crashClient(c allocatorv1.AllocatorServiceClient, l *ledger, acks *atomic.Int64, stop <-chan struct{}, round, id int) {
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		name := fmt.Sprintf("r%02d-c%02d-%05d", round, id, n)
		o := &allocatorv1.Owner{Kind: "Pod", Namespace: "crash", Name: name, Uid: "uid-" + name}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := c.Allocate(ctx, &allocatorv1.AllocateRequest{Pool: "pools/" + crashPool, Owner: o})
		cancel()
		if err != nil {
			l.lost(name)
			return
		}
		a := resp.GetAllocation()
		l.ack(name, a.GetAddress())
		acks.Add(1)
		if n%4 != 3 {
			continue
		}
		ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
		_, err = c.Release(ctx, &allocatorv1.ReleaseRequest{Name: a.GetName(), Etag: a.GetEtag(), OwnerUid: o.GetUid()})
		cancel()
		if err != nil {
			l.lost(name)
			return
		}
		l.ackRelease(name)
	}
}

// verify reads everything the restarted allocator holds and checks it
// against the ledger.
func verify(t *testing.T, c allocatorv1.AllocatorServiceClient, l *ledger, round int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()

	byAddr := map[string]string{}
	byOwner := map[string]string{}
	token := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 10_000)
		resp, err := c.ListAllocations(callCtx(t), &allocatorv1.ListAllocationsRequest{Pool: "pools/" + crashPool, PageSize: 1000, PageToken: token})
		require.NoError(t, err)
		for _, a := range resp.GetAllocations() {
			owner := a.GetOwner().GetName()
			_, err := netip.ParseAddr(a.GetAddress())
			require.NoError(t, err)
			if prev, dup := byAddr[a.GetAddress()]; dup {
				require.Failf(t, "address held twice", "round %d: %s held by %s and %s", round, a.GetAddress(), prev, owner)
			}
			if prev, dup := byOwner[owner]; dup {
				require.Failf(t, "owner holds two addresses", "round %d: %s holds %s and %s", round, owner, prev, a.GetAddress())
			}
			byAddr[a.GetAddress()] = owner
			byOwner[owner] = a.GetAddress()
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}

	for owner, addr := range l.acked {
		got, ok := byOwner[owner]
		require.True(t, ok || l.unsure[owner], "round %d: acknowledged allocation of %s (%s) lost", round, owner, addr)
		if ok {
			require.Equal(t, addr, got, "round %d: %s moved", round, owner)
		}
	}
	for owner, addr := range byOwner {
		_, acked := l.acked[owner]
		require.True(t, acked || l.unsure[owner], "round %d: %s holds %s, but nobody was told so (released: %v)", round, owner, addr, l.released[owner])
	}

	// Settle the unsure: from here on each of them is what the store says.
	for owner := range l.unsure {
		if addr, ok := byOwner[owner]; ok {
			l.acked[owner] = addr
			delete(l.released, owner)
		} else {
			delete(l.acked, owner)
		}
	}
	clear(l.unsure)

	// Point reads agree with the listing, for allocations now known to be
	// held.
	n := 0
	for owner, addr := range l.acked {
		if n++; n > 25 {
			break
		}
		resp, err := c.GetAllocation(callCtx(t), &allocatorv1.GetAllocationRequest{Name: "pools/" + crashPool + "/allocations/" + addr})
		require.NoError(t, err)
		require.Equal(t, owner, resp.GetAllocation().GetOwner().GetName())
	}
	pool, err := c.GetPool(callCtx(t), &allocatorv1.GetPoolRequest{Name: "pools/" + crashPool})
	require.NoError(t, err)
	require.Equal(t, uint64(len(byAddr)), pool.GetPool().GetStats().GetAllocated())
}

// checkFile opens the file the killed process left, as the next start
// will: bbolt's page-level consistency check passes, and the store opens
// and holds every acknowledged allocation at its acknowledged address.
func checkFile(t *testing.T, path string, l *ledger) {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	require.NoError(t, err)
	require.NoError(t, db.View(func(tx *bbolt.Tx) error {
		var errs []error
		for err := range tx.Check() {
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}))
	require.NoError(t, db.Close())

	st, err := bolt.Open(path)
	require.NoError(t, err)
	defer func() { require.NoError(t, st.Close()) }()
	snap, err := st.Snapshot(context.Background())
	require.NoError(t, err)
	held := map[string]string{}
	for _, a := range snap.Allocations {
		held[a.Owner.Name] = a.Address.String()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for owner, addr := range l.acked {
		if !l.unsure[owner] {
			require.Equal(t, addr, held[owner], "acknowledged allocation of %s not in the file", owner)
		}
	}
}

func waitUntil(t *testing.T, cond func() bool, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		require.True(t, time.Now().Before(deadline), "condition not met within %s", timeout)
		time.Sleep(time.Millisecond)
	}
}

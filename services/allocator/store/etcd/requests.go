package etcd

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/plexusnet/plexus/services/allocator/store"
)

// Request records are put with an etcd lease, which deletes them when its
// TTL runs out. A store uses its current lease for a span (a leaseSpans-th
// of the retention period) after its grant and grants the next a little
// ahead, so records cost a grant per span, not a write per request. A
// lease lives the period plus a span, so every record outlives the period.
const leaseSpans = 24

// leaseGrantTimeout bounds one grant, which outlives the commit that
// asked for it: the commits after it use the lease.
const leaseGrantTimeout = 10 * time.Second

// requestLeases hands out the lease request records are put with.
type requestLeases struct {
	retention time.Duration // how long a record is kept

	cur atomic.Pointer[requestLease] // nil until the first grant

	mu       sync.Mutex
	granting chan struct{} // closed when the grant in flight ends; nil when none
	err      error         // of the latest grant
}

type requestLease struct {
	id    clientv3.LeaseID
	until time.Time // records put before then outlive the retention period
	// renew is when the next lease is granted, in the background, so
	// commits find it ready when this one's span ends.
	renew time.Time
}

// requestLease returns the lease to put txn's request record with, or 0
// when txn records none: an atomic load and a look at the clock.
func (s *Store) requestLease(ctx context.Context, txn store.Txn) (clientv3.LeaseID, error) {
	for _, op := range txn.Ops {
		if op.Kind == store.OpPutRequest {
			return s.requests.get(ctx, s.cli)
		}
	}
	return 0, nil
}

// requestLeaseLost forgets lease, which etcd no longer knows (revoked, or
// an etcd restored from an older backup), so the next commit grants
// another.
func (s *Store) requestLeaseLost(lease clientv3.LeaseID) {
	l := &s.requests
	if cur := l.cur.Load(); cur != nil && cur.id == lease {
		l.cur.CompareAndSwap(cur, nil)
	}
}

func (l *requestLeases) get(ctx context.Context, cli *clientv3.Client) (clientv3.LeaseID, error) {
	if cur := l.cur.Load(); cur != nil {
		now := time.Now()
		if now.Before(cur.until) {
			if now.After(cur.renew) {
				l.grant(cli)
			}
			return cur.id, nil
		}
	}
	select {
	case <-l.grant(cli):
	case <-ctx.Done():
		return 0, fmt.Errorf("grant a lease for request records: %w", ctx.Err())
	}
	if cur := l.cur.Load(); cur != nil && time.Now().Before(cur.until) {
		return cur.id, nil
	}
	l.mu.Lock()
	err := l.err
	l.mu.Unlock()
	if err == nil { // granted, then lost at once
		err = rpctypes.ErrLeaseNotFound
	}
	return 0, fmt.Errorf("grant a lease for request records: %w", err)
}

// grant starts granting the next lease unless a grant is in flight, and
// returns what is closed when that grant ends.
func (l *requestLeases) grant(cli *clientv3.Client) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.granting != nil {
		return l.granting
	}
	done := make(chan struct{})
	l.granting = done
	retention := l.retention
	span := retention / leaseSpans
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), leaseGrantTimeout)
		defer cancel()
		// etcd counts the TTL from the grant, after start, and in whole
		// seconds: round up.
		start := time.Now()
		resp, err := cli.Grant(ctx, int64((retention+span+time.Second-1)/time.Second))
		l.mu.Lock()
		defer l.mu.Unlock()
		l.granting, l.err = nil, err
		if err == nil {
			l.cur.Store(&requestLease{id: resp.ID, until: start.Add(span), renew: start.Add(span * 9 / 10)})
		}
	}()
	return done
}

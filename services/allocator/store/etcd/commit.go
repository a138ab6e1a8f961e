package etcd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plexusnet/plexus/services/allocator/store"
)

const (
	// maxGuardRetries bounds the tries of a commit that read allocations
	// first and found one changed in between.
	maxGuardRetries = 16
	// maxLeaseRetries bounds the tries of a commit whose lease of request
	// records etcd no longer knew (revoked, or a restore from backup).
	maxLeaseRetries = 3
	// readChunk bounds the reads of one etcd transaction, below etcd's
	// default --max-txn-ops of 128.
	readChunk = 100
)

// Commit implements store.Store as one etcd transaction, If(conditions)
// Then(writes). When the writes depend on allocations the txn does not
// describe, they are read first and the transaction nested in one that
// checks they did not change: a failed outer compare is retried, a failed
// inner one is store.ErrConflict.
func (s *Store) Commit(ctx context.Context, txn store.Txn) (int64, error) {
	if err := txn.Validate(); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if s.isClosed() {
		return 0, store.ErrClosed
	}
	for try := 1; ; try++ {
		lease, err := s.requestLease(ctx, txn)
		if err != nil {
			return 0, s.commitError(ctx, err)
		}
		rev, err := s.commit(ctx, txn, lease)
		if !errors.Is(err, rpctypes.ErrLeaseNotFound) || try == maxLeaseRetries {
			return rev, err
		}
		// A lease of request records (its own, or a combined commit's)
		// is gone: etcd wrote nothing, so it goes again.
		s.requestLeaseLost(lease)
	}
}

// commit is Commit with its request record, if any, put with lease.
func (s *Store) commit(ctx context.Context, txn store.Txn, lease clientv3.LeaseID) (int64, error) {
	first := newPlanner(s.k, lease, nil)
	cmps, ok := first.compares(txn.Conds)
	if !ok {
		return 0, fmt.Errorf("a revision condition below 1: %w", store.ErrConflict)
	}
	first.apply(txn.Ops)
	if len(first.reads) == 0 && first.putsUnder(s.k.state()) {
		// Such a commit can go to etcd with others (combine.go).
		if reads, writes, ok := first.touched(cmps); ok {
			return s.commitCombined(ctx, cmps, first, reads, writes)
		}
	}
	if len(first.reads) == 0 {
		resp, err := s.txn(ctx, cmps, first.ops(0))
		if err != nil {
			return 0, s.commitError(ctx, err)
		}
		if !resp.Succeeded {
			return 0, store.ErrConflict
		}
		return s.committed(resp.Header.Revision), nil
	}
	for range maxGuardRetries {
		seen, err := s.readAllocs(ctx, first.reads)
		if err != nil {
			return 0, s.commitError(ctx, err)
		}
		pl := newPlanner(s.k, lease, func(key string) *store.Allocation { return seen[key].rec })
		cmps, _ := pl.compares(txn.Conds)
		pl.apply(txn.Ops)
		guards := make([]clientv3.Cmp, 0, len(pl.reads))
		for _, key := range pl.reads {
			guards = append(guards, clientv3.Compare(clientv3.ModRevision(key), "=", seen[key].modRev))
		}
		resp, err := s.txn(ctx, guards, []*pb.RequestOp{txnOp(cmps, pl.ops(0))})
		if err != nil {
			return 0, s.commitError(ctx, err)
		}
		if !resp.Succeeded {
			continue // an allocation read changed meanwhile: read again
		}
		if inner := resp.Responses[0].GetResponseTxn(); inner == nil || !inner.Succeeded {
			return 0, store.ErrConflict
		}
		return s.committed(resp.Header.Revision), nil
	}
	return 0, fmt.Errorf("commit: the allocations it replaces kept changing (%d tries)", maxGuardRetries)
}

// commitCombined sends a commit through the combiner (combine.go).
func (s *Store) commitCombined(ctx context.Context, cmps []clientv3.Cmp, pl *planner, reads, writes []string) (int64, error) {
	r := s.combine.commit(ctx, cmps, pl.ops, pl.nops(), reads, writes)
	if r.err != nil {
		return 0, s.commitError(ctx, r.err)
	}
	if !r.succeeded {
		return 0, store.ErrConflict
	}
	return s.committed(r.rev), nil
}

type readAlloc struct {
	rec    *store.Allocation
	modRev int64
}

// readAllocs reads allocation keys, a chunk per etcd transaction (the
// commit checks each key's mod revision again).
func (s *Store) readAllocs(ctx context.Context, keys []string) (map[string]readAlloc, error) {
	if len(keys) > readChunk {
		if out, ok, err := s.readAllocRange(ctx, keys); err != nil || ok {
			return out, err
		}
	}
	out := make(map[string]readAlloc, len(keys))
	for start := 0; start < len(keys); start += readChunk {
		chunk := keys[start:min(start+readChunk, len(keys))]
		ops := make([]clientv3.Op, len(chunk))
		for i, k := range chunk {
			ops[i] = clientv3.OpGet(k)
		}
		resp, err := s.cli.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return nil, fmt.Errorf("read allocations: %w", err)
		}
		for i, r := range resp.Responses {
			rr := r.GetResponseRange()
			if rr == nil || len(rr.Kvs) == 0 {
				out[chunk[i]] = readAlloc{}
				continue
			}
			kv := rr.Kvs[0]
			a, err := decodeAlloc(kv)
			if err != nil {
				return nil, fmt.Errorf("read %q: %w", kv.Key, err)
			}
			out[chunk[i]] = readAlloc{rec: &a, modRev: kv.ModRevision}
		}
	}
	return out, nil
}

// readAllocRange reads keys as one range when it holds at most twice as
// many (a chunk of a pool's deletion lies side by side); ok=false when it
// holds more.
func (s *Store) readAllocRange(ctx context.Context, keys []string) (map[string]readAlloc, bool, error) {
	lo, hi := slices.Min(keys), slices.Max(keys)
	resp, err := s.cli.Get(ctx, lo, clientv3.WithRange(hi+"\x00"), clientv3.WithLimit(int64(2*len(keys))))
	if err != nil {
		return nil, false, fmt.Errorf("read allocations: %w", err)
	}
	if resp.More {
		return nil, false, nil
	}
	out := make(map[string]readAlloc, len(keys))
	for _, k := range keys {
		out[k] = readAlloc{}
	}
	for _, kv := range resp.Kvs {
		if _, want := out[string(kv.Key)]; !want {
			continue
		}
		a, err := decodeAlloc(kv)
		if err != nil {
			return nil, false, fmt.Errorf("read %q: %w", kv.Key, err)
		}
		out[string(kv.Key)] = readAlloc{rec: &a, modRev: kv.ModRevision}
	}
	return out, true, nil
}

// commitError wraps an etcd error, keeping context errors recognisable
// and explaining the limit a large batch runs into.
func (s *Store) commitError(ctx context.Context, err error) error {
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("commit: %w", ctx.Err())
	case s.isClosed():
		return fmt.Errorf("commit: %w", store.ErrClosed)
	case errors.Is(err, rpctypes.ErrTooManyOps):
		return fmt.Errorf("commit: %w: more operations than etcd's --max-txn-ops allows (each allocation takes 3, plus 1 per commit): %w", store.ErrTooLarge, err)
	case unconfirmed(err):
		return fmt.Errorf("commit: %w: %w", store.ErrUnconfirmed, err)
	case tooLarge(err):
		return fmt.Errorf("commit: %w: more bytes than etcd's --max-request-bytes allows (each allocation takes about 600): %w", store.ErrTooLarge, err)
	}
	return fmt.Errorf("commit: %w", err)
}

// unconfirmed reports whether err is etcd giving up on a proposal it may
// still apply: it timed out waiting for the commit to be applied, or the
// leader changed under it.
func unconfirmed(err error) bool {
	for _, e := range []error{rpctypes.ErrTimeout, rpctypes.ErrTimeoutDueToLeaderFail, rpctypes.ErrTimeoutDueToConnectionLost,
		rpctypes.ErrTimeoutWaitAppliedIndex, rpctypes.ErrLeaderChanged} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// tooLarge reports whether err refuses a request for its size: etcd's
// --max-request-bytes, or gRPC's message size on either side (not etcd's
// other RESOURCE_EXHAUSTED errors).
func tooLarge(err error) bool {
	if errors.Is(err, rpctypes.ErrRequestTooLarge) {
		return true
	}
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.ResourceExhausted && strings.Contains(st.Message(), "message larger than max")
}

// committed records rev as the latest commit of this store, for Close.
func (s *Store) committed(rev int64) int64 {
	for {
		prev := s.lastCommit.Load()
		if rev <= prev || s.lastCommit.CompareAndSwap(prev, rev) {
			return rev
		}
	}
}

package etcd

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Concurrent commits that need no read first (an allocation guarded by
// "address absent" and "owner absent", the hot path) are combined: those
// waiting when the sender is free go to etcd as one transaction, each
// nested with its own compares and writes (its own commit marker among
// them), so each succeeds or fails alone while they share etcd's call,
// raft entry and fsync, and their revision.
//
// etcd decides every compare of a transaction, nested ones included,
// against the state before any of its writes, so a transaction never holds
// a commit that writes a key (or into an owner's index range) another of
// its commits compares or writes; that one waits for the next. Keys only
// compared are shared: every allocation compares its pool's revision.
//
// etcd's --max-txn-ops bounds each nested transaction by the limit minus
// the outer one's count (checkTxnRequest in etcd's v3rpc/key.go), so n
// commits need n plus the largest one's size within it, or etcd refuses
// them all: take admits a commit only within that budget.
const (
	// combineSenders bounds the combined transactions in flight per
	// store: one cost etcd the least CPU per allocation
	// (bench/results/scaleout.md, fifth round).
	combineSenders = 1
	// combineMax bounds the commits of one transaction.
	combineMax = 64
	// defaultMaxTxnOps is etcd's default --max-txn-ops, the budget a
	// combiner starts with (etcd does not tell its clients); a lower
	// limit is learned from etcd's refusals (sendBatch).
	defaultMaxTxnOps = 128
	// combineTimeout keeps a sender from waiting forever on an etcd that
	// is gone; callers wait only as long as their contexts allow.
	combineTimeout = 10 * time.Second
)

type combinedCommit struct {
	ctx  context.Context // the caller's: once it is done, nobody waits
	cmps []clientv3.Cmp
	ops  func(slot int) []*pb.RequestOp // its writes, with the marker of slot
	// size is what etcd counts of it against --max-txn-ops: the larger
	// of its compares and its writes.
	size int
	// reads and writes are the keys (an owner index range counting as
	// one) the commit compares and writes.
	reads, writes []string
	done          chan combineResult // buffered: the sender never blocks on it
}

type combineResult struct {
	rev       int64
	succeeded bool
	err       error
}

type combiner struct {
	s       *Store
	observe func(commits int) // nil: not observed

	mu      sync.Mutex
	queue   []*combinedCommit
	senders int
	// read and written are take's sets of keys, kept between calls.
	read, written map[string]bool
	// maxOps is the op budget of a combined transaction, an upper bound
	// of etcd's --max-txn-ops: defaultMaxTxnOps when 0, lowered when etcd
	// refuses a transaction within it.
	maxOps int
}

// commit waits for cmps/ops to be sent, combined with whatever else is
// waiting, and returns its outcome. nops is the number of ops ops
// returns; reads and writes are what it compares and writes, the marker
// left out (planner.touched).
func (c *combiner) commit(ctx context.Context, cmps []clientv3.Cmp, ops func(slot int) []*pb.RequestOp, nops int, reads, writes []string) combineResult {
	cc := &combinedCommit{ctx: ctx, cmps: cmps, ops: ops, size: max(len(cmps), nops), reads: reads, writes: writes, done: make(chan combineResult, 1)}
	c.mu.Lock()
	c.queue = append(c.queue, cc)
	start := c.senders < combineSenders
	if start {
		c.senders++
	}
	c.mu.Unlock()
	if start {
		go c.send()
	}
	select {
	case r := <-cc.done:
		return r
	case <-ctx.Done():
		// The commit may still land, as any etcd transaction whose
		// caller stopped waiting may.
		return combineResult{err: ctx.Err()}
	}
}

// send takes what is waiting and commits it until nothing is left.
func (c *combiner) send() {
	for {
		c.mu.Lock()
		batch := c.take()
		if len(batch) == 0 {
			c.senders--
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		c.sendBatch(batch)
	}
}

// take removes from the queue, in order, up to combineMax commits none of
// which writes what another compares or writes, within the op budget; the
// first is always taken (alone, it goes as it is). Commits whose callers
// stopped waiting are dropped unsent. c.mu is held.
func (c *combiner) take() []*combinedCommit {
	var batch []*combinedCommit
	if c.read == nil {
		c.read, c.written = map[string]bool{}, map[string]bool{}
	}
	budget := c.maxOps
	if budget == 0 {
		budget = defaultMaxTxnOps
	}
	largest := 0 // the size of the largest commit taken
	read, written := c.read, c.written
	defer clear(read)
	defer clear(written)
	in := func(set map[string]bool) func(string) bool { return func(k string) bool { return set[k] } }
	rest := c.queue[:0]
	for _, cc := range c.queue {
		if cc.ctx.Err() != nil {
			continue
		}
		if len(batch) == combineMax ||
			len(batch) > 0 && len(batch)+1+max(largest, cc.size) > budget ||
			slices.ContainsFunc(cc.writes, in(read)) || slices.ContainsFunc(cc.writes, in(written)) ||
			slices.ContainsFunc(cc.reads, in(written)) {
			rest = append(rest, cc)
			continue
		}
		largest = max(largest, cc.size)
		for _, k := range cc.reads {
			read[k] = true
		}
		for _, k := range cc.writes {
			written[k] = true
		}
		batch = append(batch, cc)
	}
	clear(c.queue[len(rest):])
	c.queue = rest
	return batch
}

func (c *combiner) sendBatch(batch []*combinedCommit) {
	ctx, cancel := context.WithTimeout(context.Background(), combineTimeout)
	defer cancel()
	if len(batch) == 1 {
		c.observed(1)
		cc := batch[0]
		resp, err := c.s.txn(ctx, cc.cmps, cc.ops(0))
		if err != nil {
			cc.done <- combineResult{err: err}
			return
		}
		cc.done <- combineResult{rev: resp.Header.Revision, succeeded: resp.Succeeded}
		return
	}
	ops := make([]*pb.RequestOp, len(batch))
	for i, cc := range batch {
		ops[i] = txnOp(cc.cmps, cc.ops(i))
	}
	resp, err := c.s.txn(ctx, nil, ops)
	if errors.Is(err, rpctypes.ErrTooManyOps) {
		// etcd's limit is below the budget and nothing was written:
		// lower the budget and send the commits again, first. A lone
		// commit always goes, so this ends.
		largest := 0
		for _, cc := range batch {
			largest = max(largest, cc.size)
		}
		budget := len(batch) + largest - 1
		c.mu.Lock()
		first := c.maxOps == 0
		c.maxOps = min(budget, cmp.Or(c.maxOps, budget))
		c.queue = append(batch, c.queue...)
		c.mu.Unlock()
		if first { // the later refusals only narrow it down
			c.s.logger.Warn("etcd refused a combined transaction: its --max-txn-ops is below etcd's default, combining less",
				"commits", len(batch), "largest", largest, "budget", budget)
		}
		return
	}
	c.observed(len(batch))
	for i, cc := range batch {
		switch {
		case err != nil:
			cc.done <- combineResult{err: err}
		default:
			inner := resp.Responses[i].GetResponseTxn()
			cc.done <- combineResult{rev: resp.Header.Revision, succeeded: inner != nil && inner.Succeeded}
		}
	}
}

// observed reports a transaction of n commits that etcd did not refuse
// for its size, so each commit is observed once.
func (c *combiner) observed(n int) {
	if c.observe != nil {
		c.observe(n)
	}
}

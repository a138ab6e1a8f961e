// Package store defines how the allocator persists pools and allocations.
//
// A Store is a small transactional key space with a global revision, in the
// shape of etcd's: a transaction is a list of conditions and a list of
// operations, applied atomically when every condition holds. Every commit
// gets a revision above those of the commits before it, and every change
// can be watched from a revision. A store may give commits made at once
// one revision (etcd combines concurrent allocations into one
// transaction); a failed commit takes none.
// The allocator keeps its free-space index in memory and uses the store only
// as the durable record, so a store never has to find a free address.
//
// Implementations: bolt (embedded default, group commit; package memory
// is a bolt store in a file without a name, for tests and demos) and etcd
// (several replicas). Both pass the suite in internal/storetest.
package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/plexusnet/plexus/services/allocator/decide"
)

// Errors returned by stores. Callers test them with errors.Is.
var (
	// ErrConflict means a transaction condition did not hold; nothing was
	// written. The caller re-reads and decides again.
	ErrConflict = errors.New("store: condition failed")
	// ErrCompacted means a watch asked for a revision the store no longer
	// keeps history for; the caller must take a new snapshot.
	ErrCompacted = errors.New("store: revision compacted")
	// ErrTooSlow means a watcher read so slowly that it fell more than
	// half the history behind; it was cut off while the events it missed
	// are still kept, so it resumes from the last revision it received.
	ErrTooSlow = errors.New("store: watcher too slow")
	// ErrClosed means the store was closed.
	ErrClosed = errors.New("store: closed")
	// ErrInvalid means a transaction is malformed (see Txn.Validate); it
	// is a bug in the caller, not a conflict, and retrying cannot help.
	ErrInvalid = errors.New("store: invalid transaction")
	// ErrTooLarge means the store refused a transaction for its size
	// (etcd's --max-txn-ops or --max-request-bytes); nothing was written,
	// and the same transaction will be refused again.
	ErrTooLarge = errors.New("store: transaction too large")
	// ErrUnconfirmed means the store could not confirm a commit in time
	// (etcd's "request timed out", a leader change): it may have been
	// applied or not. A retry with the same request id finds out.
	ErrUnconfirmed = errors.New("store: commit not confirmed; it may have been applied")
)

// Pool is the durable record of a pool. CIDRs and reserved ranges are kept
// in canonical text form; the allocator parses them strictly on the way in.
type Pool struct {
	ID           string
	CIDRs        []string
	Reserved     []string
	ReuseDelay   time.Duration
	Labels       map[string]string
	AllowOverlap bool
	// ClusterQuota is the most allocations the owners of one member
	// cluster may hold in the pool; 0 means no quota.
	ClusterQuota uint32
	// Deleting marks a pool whose forced deletion is under way: its
	// allocations are released in several commits before the pool goes,
	// and no replica hands out or changes anything in it meanwhile.
	Deleting   bool
	CreateTime time.Time
	UpdateTime time.Time
	// Revision is the revision of the commit that last wrote the pool; it
	// is the pool's etag. Set by the store.
	Revision int64
}

// Allocation is the durable record of one allocated address.
type Allocation struct {
	Pool       string
	Address    netip.Addr
	Owner      decide.Owner
	CreateTime time.Time
	// RequestID is the idempotency key the allocation was made with, if
	// any.
	RequestID string
	// CreatorCluster is the member cluster of the caller that created the
	// allocation; empty for a fleet or shared caller. A clusterset VIP
	// counts against its creator's cluster quota.
	CreatorCluster string
	// Revision is the revision of the commit that wrote the allocation; it
	// is the allocation's etag. Set by the store.
	Revision int64
}

// Quarantine records a released address that must not be handed out again
// before Until (the pool's reuse delay).
type Quarantine struct {
	Pool    string
	Address netip.Addr
	Until   time.Time
}

// Request records the answer to an idempotent request, so a retry with the
// same request id gets the first answer even after a restart.
//
// A store keeps a request record for DefaultRequestRetention (stores let
// tests set a shorter period) after the commit that put it, or put it
// again, and drops it some time after that: every store sweeps or expires
// its records on its own, bounded so it never holds commits up for long.
// Dropping a record is not a commit: it makes no event and changes no
// other record. From then on GetRequest does not find it and
// CondRequestAbsent holds: a retry counts as a new request.
type Request struct {
	ID string
	// Allocations are "pool/address" keys of what the request allocated,
	// in request order.
	Allocations []string
	// Revision is set by the store.
	Revision int64
}

// CondKind is the kind of a transaction condition.
type CondKind int

// Condition kinds.
const (
	// CondPoolAbsent holds when pool Pool does not exist.
	CondPoolAbsent CondKind = iota + 1
	// CondPoolRevision holds when pool Pool exists at exactly Revision.
	CondPoolRevision
	// CondAllocationAbsent holds when Pool has no allocation of Address.
	CondAllocationAbsent
	// CondAllocationRevision holds when the allocation of Address in Pool
	// exists at exactly Revision.
	CondAllocationRevision
	// CondOwnerAbsent holds when no allocation in Pool has owner key
	// OwnerKey.
	CondOwnerAbsent
	// CondRequestAbsent holds when no request with id RequestID is
	// recorded (a record past its retention may be gone; see Request).
	CondRequestAbsent
	// CondPoolEmpty holds when Pool holds no allocation (whether or not
	// the pool exists).
	CondPoolEmpty
	// CondPoolsUnchangedSince holds when no commit after Revision (0 or
	// more) put or deleted a pool (OpPutPool, OpDeletePool). A replica
	// that checked a new pool against the others as of Revision commits
	// it with this condition, so no pool created meanwhile through
	// another replica can overlap it. Deletions count so that a store
	// can check it as one record of the latest pool change, whatever the
	// number of pools.
	CondPoolsUnchangedSince
	// CondRangeFree holds when Pool holds no allocation of an address
	// from Address to Last, both included (one family, Address <= Last).
	CondRangeFree
)

// Cond is one condition of a transaction.
type Cond struct {
	Kind      CondKind
	Pool      string
	Address   netip.Addr
	OwnerKey  string
	RequestID string
	Revision  int64
	// Last ends the range of CondRangeFree.
	Last netip.Addr
}

// OpKind is the kind of a transaction operation.
type OpKind int

// Operation kinds.
const (
	// OpPutPool creates or replaces Pool.
	OpPutPool OpKind = iota + 1
	// OpDeletePool deletes pool PoolID, with all its allocations, their
	// owner index entries and its quarantine records.
	OpDeletePool
	// OpPutAllocation creates Allocation (and its owner index entry) and
	// removes any quarantine record of its address.
	OpPutAllocation
	// OpDeleteAllocation deletes the allocation of Address in PoolID (and
	// its owner index entry).
	OpDeleteAllocation
	// OpPutQuarantine records Quarantine.
	OpPutQuarantine
	// OpPutRequest records Request, replacing any record with its id,
	// for the retention period (DefaultRequestRetention) from this
	// commit.
	OpPutRequest
)

// Op is one operation of a transaction. Only the fields of its kind are
// used.
type Op struct {
	Kind       OpKind
	Pool       *Pool
	PoolID     string
	Allocation *Allocation
	Address    netip.Addr
	Quarantine *Quarantine
	Request    *Request
}

// Txn is applied atomically: all Ops when every Cond holds, nothing
// otherwise (ErrConflict). Conditions are evaluated against the state
// before the transaction. Ops apply in order, and no two name the same
// record (Validate): a pool is put or deleted by one op, an address's
// allocation put or deleted by one and its quarantine record put by one
// (OpPutAllocation counts for both), a request put by one, and nothing
// else of a pool the txn deletes. An op that finds nothing to delete is a
// no-op and emits no event. OpPutAllocation over an existing allocation
// of the same address replaces it (and its owner index entry); guard it
// with CondAllocationAbsent or CondAllocationRevision.
type Txn struct {
	Conds []Cond
	Ops   []Op
}

// Snapshot is the whole state at one revision. Pools are sorted by ID;
// allocations and quarantine records by pool, then address.
type Snapshot struct {
	Revision    int64
	Pools       []Pool
	Allocations []Allocation
	Quarantine  []Quarantine
}

// EventType says what changed.
type EventType int

// Event types.
const (
	EventPutPool EventType = iota + 1
	EventDeletePool
	EventPutAllocation
	EventDeleteAllocation
	// EventPutQuarantine tells other replicas that a released address must
	// stay out of their free-space index until Quarantine.Until.
	EventPutQuarantine
)

// Event is one change, at the revision of the commit that made it; the
// events of one commit share its revision and come in the order of its
// ops. A DeleteAllocation event carries the allocation as it was; a
// DeletePool event carries the pool as it was (the allocations it held
// produce their own DeleteAllocation events first). The records an event
// points to may be shared between watchers and must not be modified.
type Event struct {
	Type       EventType
	Revision   int64
	Pool       *Pool
	Allocation *Allocation
	Quarantine *Quarantine
	// Last is set on the last event of its revision: a watcher that has
	// applied it has applied the whole commit. (A commit whose changes
	// make no event, such as one that only records a request, sends
	// none.)
	Last bool
	// Err is set on the last event of a watch channel (ChanCursor) that
	// ended for a reason other than its context: the store closed, the
	// watcher fell too far behind, or history was compacted
	// (ErrCompacted). Type is zero then.
	Err error
}

// A Cursor reads a watch's events (Store.WatchCursor) from where the store
// keeps them, with no goroutine or buffer of its own where it can: such a
// watch costs its reader's goroutine and the cursor, where a channel costs
// a goroutine and a buffer per watch.
type Cursor interface {
	// Next appends the events ready after the last one read to buf, at
	// most cap(buf)-len(buf) of them (at least one), waiting until there
	// is one. It returns ctx's error when ctx ends first, and the error
	// that ends the watch (ErrTooSlow, ErrCompacted, ErrClosed), with the
	// last events before it if any are left; the cursor is done after an
	// error.
	Next(ctx context.Context, buf []Event) ([]Event, error)
	// Close lets go of what the store keeps for the cursor (a cursor of
	// one pool that caught up keeps the pool's wait) and ends a Next
	// that waits with ErrClosed. It may be called while another
	// goroutine is in Next, and more than once.
	Close()
}

// AllocationKey is where an allocation sorts among those of every pool:
// by pool id, then address (IPv4 first).
type AllocationKey struct {
	Pool    string
	Address netip.Addr
}

// CheckAfter refuses a key PageAllocations cannot start after: one that
// is not the zero key and does not name an address of pool (of any pool
// when pool is "").
func (k AllocationKey) CheckAfter(pool string) error {
	if k == (AllocationKey{}) || (k.Pool != "" && k.Address.IsValid() && (pool == "" || k.Pool == pool)) {
		return nil
	}
	return fmt.Errorf("page allocations of %q after %q %v: the key must name an address of the pool read", pool, k.Pool, k.Address)
}

// Page is one page of PageAllocations.
type Page struct {
	// Revision is the revision the page was read at.
	Revision    int64
	Allocations []Allocation
	// More is set when allocations follow the page's last.
	More bool
}

// ChanCursor reads a channel of events as a cursor, for a watch that
// offers only a channel (an etcd watch of its own). The channel is closed
// when the watch's context ends, after an event carrying Err otherwise.
func ChanCursor(ch <-chan Event) Cursor { return chanCursor(ch) }

type chanCursor <-chan Event

// Close does nothing: the channel's watch ends with its context.
func (c chanCursor) Close() {}

func (c chanCursor) Next(ctx context.Context, buf []Event) ([]Event, error) {
	if cap(buf) == len(buf) {
		buf = slices.Grow(buf, 1)
	}
	select {
	case e, ok := <-c:
		for {
			switch {
			case !ok:
				// A store closes the channel without an error only
				// when the watch's context ends.
				return buf, cmp.Or(ctx.Err(), context.Canceled)
			case e.Err != nil:
				return buf, e.Err
			}
			buf = append(buf, e)
			if len(buf) == cap(buf) {
				return buf, nil
			}
			select {
			case e, ok = <-c:
			default:
				return buf, nil
			}
		}
	case <-ctx.Done():
		return buf, ctx.Err()
	}
}

// Store is the allocator's durable record. Implementations are safe for
// concurrent use; Commit is durable when it returns (for bolt: fsync'd).
type Store interface {
	// Snapshot returns the whole state at the current revision.
	Snapshot(ctx context.Context) (*Snapshot, error)
	// StreamSnapshot reads what Snapshot returns, at one revision, for a
	// reader that rebuilds its state from it and should not hold the
	// whole of it beside what it builds: it calls pools once, with every
	// pool and how many allocations each holds where the store knows it
	// before it hands them over (bolt; 0 on etcd), so the reader sizes its
	// tables once; then alloc with each allocation, in Snapshot's order
	// (alloc must not keep the pointer); and returns the revision and the
	// quarantine records. An error from pools or alloc ends it and is
	// returned.
	StreamSnapshot(ctx context.Context, pools func(pools []Pool, held []int) error, alloc func(*Allocation) error) (rev int64, quarantine []Quarantine, err error)
	// Commit applies txn atomically and returns its revision, or
	// ErrConflict when a condition failed.
	Commit(ctx context.Context, txn Txn) (int64, error)
	// GetRequest returns the recorded request with id, or ok=false: never
	// recorded, or recorded longer ago than the store keeps records (see
	// Request).
	GetRequest(ctx context.Context, id string) (Request, bool, error)
	// PageAllocations returns up to limit allocations of pool (of every
	// pool when pool is ""), in (pool, address) order, that sort after
	// `after` (from the first when after is the zero key; otherwise it
	// names an allocation's pool, which is pool when pool is set, and
	// address), as they were at revision rev, or at the current revision
	// when rev is 0: a reader of a million holds a page, not the million.
	// It returns ErrCompacted once rev is gone. etcd keeps the revisions
	// before its current one until it compacts them; bolt keeps only its
	// current one, and reads its whole file for each page (alone on a
	// bolt file, the allocator serves its watches from memory instead).
	PageAllocations(ctx context.Context, rev int64, pool string, after AllocationKey, limit int) (Page, error)
	// Revision returns the revision of the latest commit: of any replica
	// on a store several share (etcd).
	Revision(ctx context.Context) (int64, error)
	// Ready returns nil once the store can commit (bolt builds its
	// index in the background after it opens; commits wait for it)
	// and while it answers (etcd may be down), else why not.
	Ready(ctx context.Context) error
	// WatchCursor reads every event with a revision greater than fromRev,
	// in order, until ctx is done or an error ends it (see Cursor);
	// with a pool, the cursor may leave out every event but that pool's
	// allocation events, and a cursor that caught up then waits for the
	// pool's next event only. fromRev older than the history kept returns
	// ErrCompacted. A watcher that falls far behind ends with an error
	// that wraps ErrTooSlow while the events it needs are still kept (it
	// resumes from its last revision), or ErrCompacted once they are gone
	// (it takes a new snapshot). A slow watcher never delays commits. ctx
	// bounds the watch where the store needs a goroutine for it after all
	// (an etcd watch from before the history it keeps in memory).
	WatchCursor(ctx context.Context, fromRev int64, pool string) (Cursor, error)
	// Close releases the store. Watchers get an Err event (ErrClosed);
	// later calls return ErrClosed. Closing twice is not an error.
	Close() error
}

// DefaultRequestRetention is how long every store keeps a request record:
// a retry with the same request id within it gets the first answer. The
// API promises no period, and a client retries a lost reply within
// seconds or minutes; a day covers that with room, while records of every
// request kept for good would grow without bound (the bolt file) or fill
// a space quota (etcd, whose commits then all fail). Once a record is gone
// its id counts as new; Allocate stays idempotent per owner all the same.
const DefaultRequestRetention = 24 * time.Hour

// Limits on the identifiers a store keys by. They are far above what the
// allocator's API admits and only keep keys within what every store can
// hold.
const (
	MaxIDLen       = 1024
	MaxOwnerKeyLen = 4096
)

// Validate reports (wrapping ErrInvalid) what makes txn impossible to
// apply: no ops, an unknown kind, a missing record, an empty or oversized
// identifier, a NUL byte in a pool id or owner key (stores use NUL as a
// key separator), or an invalid or zoned address. Stores call it before
// anything else, so a malformed txn never reaches disk.
func (t Txn) Validate() error {
	if len(t.Ops) == 0 {
		return fmt.Errorf("%w: no operations", ErrInvalid)
	}
	for i, c := range t.Conds {
		if err := c.validate(); err != nil {
			return fmt.Errorf("%w: condition %d: %w", ErrInvalid, i, err)
		}
	}
	for i, op := range t.Ops {
		if err := op.validate(); err != nil {
			return fmt.Errorf("%w: op %d: %w", ErrInvalid, i, err)
		}
	}
	if i, err := t.overlap(); err != nil {
		return fmt.Errorf("%w: op %d: %w", ErrInvalid, i, err)
	}
	return nil
}

// overlap finds the first op that names a record an earlier op names, or
// a record of a pool the txn deletes.
func (t Txn) overlap() (int, error) {
	if len(t.Ops) == 1 {
		return 0, nil
	}
	type record struct {
		kind OpKind
		id   string // pool or request id
		addr netip.Addr
	}
	seen := make(map[record]bool, 2*len(t.Ops)) // an allocation put claims its quarantine record too
	claim := func(r record) bool {
		dup := seen[r]
		seen[r] = true
		return !dup
	}
	var deleted map[string]bool
	for i, op := range t.Ops {
		ok := true
		switch pool, addr := op.record(); op.Kind {
		case OpPutPool:
			ok = claim(record{OpPutPool, pool, addr})
		case OpDeletePool:
			ok = claim(record{OpPutPool, pool, addr})
			if deleted == nil {
				deleted = map[string]bool{}
			}
			deleted[pool] = true
		case OpPutAllocation:
			ok = claim(record{OpPutAllocation, pool, addr}) && claim(record{OpPutQuarantine, pool, addr})
		case OpDeleteAllocation:
			ok = claim(record{OpPutAllocation, pool, addr})
		case OpPutQuarantine:
			ok = claim(record{OpPutQuarantine, pool, addr})
		case OpPutRequest:
			ok = claim(record{OpPutRequest, op.Request.ID, addr})
		}
		if !ok {
			return i, errors.New("names a record an earlier op of the transaction names")
		}
	}
	for i, op := range t.Ops {
		if deleted == nil {
			break
		}
		if pool, _ := op.record(); deleted[pool] && op.Kind != OpDeletePool {
			return i, fmt.Errorf("names a record of pool %q, which the transaction deletes", pool)
		}
	}
	return 0, nil
}

// record is the pool and address of the record op names ("" and the zero
// address where it names none).
func (op Op) record() (string, netip.Addr) {
	switch op.Kind {
	case OpPutPool:
		return op.Pool.ID, netip.Addr{}
	case OpDeletePool:
		return op.PoolID, netip.Addr{}
	case OpPutAllocation:
		return op.Allocation.Pool, op.Allocation.Address
	case OpDeleteAllocation:
		return op.PoolID, op.Address
	case OpPutQuarantine:
		return op.Quarantine.Pool, op.Quarantine.Address
	}
	return "", netip.Addr{}
}

func (c Cond) validate() error {
	switch c.Kind {
	case CondPoolAbsent, CondPoolRevision, CondPoolEmpty:
		return validID("pool", c.Pool)
	case CondAllocationAbsent, CondAllocationRevision:
		return errors.Join(validID("pool", c.Pool), validAddr(c.Address))
	case CondOwnerAbsent:
		return errors.Join(validID("pool", c.Pool), validOwnerKey(c.OwnerKey))
	case CondRequestAbsent:
		return validID("request id", c.RequestID)
	case CondPoolsUnchangedSince:
		if c.Revision < 0 {
			return fmt.Errorf("revision %d below 0", c.Revision)
		}
		return nil
	case CondRangeFree:
		if err := errors.Join(validID("pool", c.Pool), validAddr(c.Address), validAddr(c.Last)); err != nil {
			return err
		}
		if c.Address.Is4() != c.Last.Is4() || c.Last.Less(c.Address) {
			return fmt.Errorf("range %s-%s is not in order or mixes families", c.Address, c.Last)
		}
		return nil
	}
	return fmt.Errorf("unknown condition kind %d", c.Kind)
}

func (op Op) validate() error {
	switch op.Kind {
	case OpPutPool:
		if op.Pool == nil {
			return errors.New("put pool without a pool")
		}
		return validID("pool", op.Pool.ID)
	case OpDeletePool:
		return validID("pool", op.PoolID)
	case OpPutAllocation:
		if a := op.Allocation; a != nil {
			return errors.Join(validID("pool", a.Pool), validAddr(a.Address), validOwnerKey(a.Owner.Key()))
		}
		return errors.New("put allocation without an allocation")
	case OpDeleteAllocation:
		return errors.Join(validID("pool", op.PoolID), validAddr(op.Address))
	case OpPutQuarantine:
		if q := op.Quarantine; q != nil {
			return errors.Join(validID("pool", q.Pool), validAddr(q.Address))
		}
		return errors.New("put quarantine without a record")
	case OpPutRequest:
		if op.Request == nil {
			return errors.New("put request without a request")
		}
		return validID("request id", op.Request.ID)
	}
	return fmt.Errorf("unknown op kind %d", op.Kind)
}

func validID(what, id string) error {
	switch {
	case id == "":
		return fmt.Errorf("empty %s", what)
	case len(id) > MaxIDLen:
		return fmt.Errorf("%s longer than %d bytes", what, MaxIDLen)
	case strings.IndexByte(id, 0) >= 0:
		return fmt.Errorf("%s %q contains a NUL byte", what, id)
	}
	return nil
}

func validOwnerKey(k string) error {
	switch {
	case len(k) > MaxOwnerKeyLen:
		return fmt.Errorf("owner key longer than %d bytes", MaxOwnerKeyLen)
	case strings.IndexByte(k, 0) >= 0:
		return fmt.Errorf("owner key %q contains a NUL byte", k)
	}
	return nil
}

func validAddr(a netip.Addr) error {
	switch {
	case !a.IsValid():
		return errors.New("invalid address")
	case a.Zone() != "":
		return fmt.Errorf("address %s has a zone", a)
	}
	return nil
}

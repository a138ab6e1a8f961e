// Package store defines how the allocator persists pools and allocations.
//
// A Store is a small transactional key space with a global revision, in the
// shape of etcd's: a transaction is conditions and operations, applied
// atomically when every condition holds. Every commit gets a revision above
// those before it (commits made at once may share one; a failed commit
// takes none), and every change can be watched from a revision. The
// allocator keeps its free-space index in memory, so a store never has to
// find a free address.
//
// Implementations: bolt (the default; package memory is bolt in a file
// without a name) and etcd (several replicas). Both pass internal/storetest.
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
// same request id gets the first answer even after a restart. A store
// keeps it for DefaultRequestRetention after the commit that last put it,
// then drops it on its own, without a commit or an event; from then on a
// retry counts as a new request.
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
	// more) put or deleted a pool: a replica that checked a new pool
	// against the others as of Revision commits it with this condition,
	// so no pool made meanwhile elsewhere can overlap it.
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

// Txn is applied atomically: all Ops when every Cond holds (evaluated
// against the state before it), nothing otherwise (ErrConflict). Ops apply
// in order and no two name the same record (Validate; OpPutAllocation names
// the address's quarantine record too, and OpDeletePool everything of its
// pool). A delete that finds nothing emits no event; OpPutAllocation over
// an allocation replaces it (guard it with CondAllocationAbsent or
// CondAllocationRevision).
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

// Event is one change, at the revision of the commit that made it, in the
// order of its ops. Delete events carry the record as it was (a pool's
// allocations have their own DeleteAllocation events first). The records
// an event points to may be shared between watchers: do not modify them.
type Event struct {
	Type       EventType
	Revision   int64
	Pool       *Pool
	Allocation *Allocation
	Quarantine *Quarantine
	// Last is set on the last event of its revision: a watcher that has
	// applied it has applied the whole commit.
	Last bool
	// Err, with Type zero, ends a watch channel (ChanCursor) for a reason
	// other than its context (ErrClosed, ErrTooSlow, ErrCompacted).
	Err error
}

// A Cursor reads a watch's events (Store.WatchCursor) from where the store
// keeps them, with no goroutine or buffer of its own where it can.
type Cursor interface {
	// Next appends up to cap(buf)-len(buf) (at least one) of the events
	// after the last one read, waiting for one. It returns ctx's error, or
	// the one that ends the watch (ErrTooSlow, ErrCompacted, ErrClosed)
	// with the events before it; the cursor is done after an error.
	Next(ctx context.Context, buf []Event) ([]Event, error)
	// Close lets go of what the store keeps for the cursor and ends a
	// waiting Next with ErrClosed; it may be called during Next, and
	// more than once.
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
	// StreamSnapshot hands over what Snapshot returns, for a reader that
	// should not hold it whole beside what it builds: pools once, with
	// each pool's count of allocations where the store knows it (bolt; 0
	// on etcd), then alloc with each allocation in Snapshot's order (it
	// must not keep the pointer). It returns the revision and the
	// quarantine records, or the first error of pools or alloc.
	StreamSnapshot(ctx context.Context, pools func(pools []Pool, held []int) error, alloc func(*Allocation) error) (rev int64, quarantine []Quarantine, err error)
	// Commit applies txn atomically and returns its revision, or
	// ErrConflict when a condition failed.
	Commit(ctx context.Context, txn Txn) (int64, error)
	// GetRequest returns the recorded request with id, or ok=false: never
	// recorded, or recorded longer ago than the store keeps records (see
	// Request).
	GetRequest(ctx context.Context, id string) (Request, bool, error)
	// PageAllocations returns up to limit allocations of pool (of every
	// pool when pool is ""), in (pool, address) order, after `after` (the
	// zero key: from the first), as they were at revision rev (0: the
	// current one); ErrCompacted once rev is gone. etcd keeps past
	// revisions until it compacts them; bolt keeps only its current one.
	PageAllocations(ctx context.Context, rev int64, pool string, after AllocationKey, limit int) (Page, error)
	// Revision returns the revision of the latest commit: of any replica
	// on a store several share (etcd).
	Revision(ctx context.Context) (int64, error)
	// Ready returns nil while the store can commit, else why not.
	Ready(ctx context.Context) error
	// WatchCursor reads every event after fromRev, in order (see Cursor);
	// with a pool, the cursor may leave out all but that pool's
	// allocation events. fromRev older than the history kept returns
	// ErrCompacted. A watcher far behind ends with ErrTooSlow while the
	// events it needs are kept (it resumes from its last revision), with
	// ErrCompacted once they are gone (it takes a new snapshot); it never
	// delays commits. ctx bounds a watch the store runs a goroutine for.
	WatchCursor(ctx context.Context, fromRev int64, pool string) (Cursor, error)
	// Close releases the store. Watchers get an Err event (ErrClosed);
	// later calls return ErrClosed. Closing twice is not an error.
	Close() error
}

// DefaultRequestRetention is how long every store keeps a request record.
// A client retries a lost reply within seconds or minutes; records kept
// for good would grow the bolt file without bound or fill etcd's space
// quota. Allocate stays idempotent per owner after a record is gone.
const DefaultRequestRetention = 24 * time.Hour

// Limits on the identifiers a store keys by, far above what the API
// admits.
const (
	MaxIDLen       = 1024
	MaxOwnerKeyLen = 4096
)

// Validate reports (wrapping ErrInvalid) what makes txn impossible to
// apply: no ops, an unknown kind, a missing record, an empty or oversized
// identifier, a NUL byte (the stores' key separator), an invalid or zoned
// address, or two ops naming one record. Stores call it first.
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

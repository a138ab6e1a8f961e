package bolt

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	bbolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/plexusnet/plexus/services/allocator/store"
	"github.com/plexusnet/plexus/services/allocator/store/internal/eventlog"
	"github.com/plexusnet/plexus/services/allocator/store/internal/record"
)

// Bucket and meta key names.
var (
	bucketMeta       = []byte("meta")
	bucketPools      = []byte("pools")
	bucketRecords    = []byte("records")
	bucketQuarantine = []byte("quarantine")
	bucketRequests   = []byte("requests")

	keyFormat   = []byte("format")
	keyRevision = []byte("revision")
	keyAllocs   = []byte("allocations")
	// keyPoolsChanged holds the revision of the latest commit that put
	// or deleted a pool (CondPoolsUnchangedSince); absent until then.
	keyPoolsChanged = []byte("pools-changed")
)

// fileFormat is the layout version written in the meta bucket; Open
// refuses a file of another version rather than misread it.
const fileFormat = 4

const (
	maxBatch    = 4096    // transactions committed together at most
	maxBatchOps = 1 << 16 // ops of one batch, once it holds one transaction
	// DefaultLockTimeout is how long Open waits for another process to
	// release the file.
	DefaultLockTimeout = 5 * time.Second
	// mmapSize is reserved address space, not memory: with it, reads
	// (snapshots) never stall a commit that grows the file below it.
	mmapSize  = 1 << 30
	allocFill = 0.9 // the page fill of the records bucket (newWriter)
)

// Option configures Open.
type Option func(*options)

type options struct {
	noSync      bool
	noWarm      bool
	history     int
	lockTimeout time.Duration
	logger      *slog.Logger

	requestRetention time.Duration
	observeExpired   func(records int)
}

// WithNoSync skips fsync. A crash then loses acknowledged commits: for
// benchmarks that measure everything but the disk, never for serving.
func WithNoSync() Option { return func(o *options) { o.noSync = true } }

// WithoutWarmUp skips reading the file into the page cache on open (see
// Store.warm), for callers that will not take a snapshot.
func WithoutWarmUp() Option { return func(o *options) { o.noWarm = true } }

// WithHistory sets how many events are kept in memory for watches from a
// past revision (default 100,000).
func WithHistory(events int) Option { return func(o *options) { o.history = events } }

// WithExpiredObserver makes the sweeper report how many request records
// it dropped past their retention (nil: none), for a metric.
func WithExpiredObserver(fn func(records int)) Option {
	return func(o *options) { o.observeExpired = fn }
}

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// Store is a store.Store in a bbolt file.
type Store struct {
	db     *bbolt.DB
	log    *eventlog.Log
	logger *slog.Logger
	path   string

	// The queue of transactions waiting for the committer.
	qmu     sync.Mutex
	queue   []*pending
	closing bool
	kick    chan struct{}
	stopped chan struct{}
	closed  atomic.Bool

	// The sweeper of request records (requests.go).
	retention, span  time.Duration
	stopSweep, swept chan struct{}
	observeExpired   func(records int) // nil: not observed

	// Owned by the committer goroutine; seq numbers the next new record.
	rev    int64
	allocs int64
	index  *index
	seq    uint64
	// indexed is closed once the index is built, or failed to be.
	indexed  chan struct{}
	indexErr error

	txns, conflicts, batches atomic.Uint64
}

var _ store.Store = (*Store)(nil)

// Open opens (creating if needed) the store file at path. A file left by
// a crash opens cleanly: bbolt's two meta pages make the last committed
// transaction the state.
func Open(path string, opts ...Option) (*Store, error) {
	o := options{
		history:     eventlog.DefaultCapacity,
		lockTimeout: DefaultLockTimeout,
		logger:      slog.Default(),

		requestRetention: store.DefaultRequestRetention,
	}
	for _, opt := range opts {
		opt(&o)
	}
	_, statErr := os.Stat(path)
	created := errors.Is(statErr, fs.ErrNotExist)

	db, err := openFile(path, o)
	if err != nil {
		return nil, err
	}
	s := &Store{
		db:      db,
		logger:  o.logger,
		path:    path,
		kick:    make(chan struct{}, 1),
		stopped: make(chan struct{}),

		retention:      o.requestRetention,
		observeExpired: o.observeExpired,
		span:           spanOf(o.requestRetention),
		stopSweep:      make(chan struct{}),
		swept:          make(chan struct{}),
	}
	if err := db.Update(s.init); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	if created && !o.noSync {
		// The file's directory entry must survive a power loss too.
		if err := syncDir(filepath.Dir(path)); err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("open store %s: %w", path, err)
		}
	}
	// Only the committer needs the index: it is built beside the
	// allocator's snapshot.
	s.indexed = make(chan struct{})
	go func() {
		defer close(s.indexed)
		if err := s.buildIndex(); err != nil {
			s.indexErr = fmt.Errorf("store %s: index: %w", path, err)
		}
	}()
	s.log = eventlog.New(o.history, s.rev)
	go s.run()
	go s.sweeper()
	if !o.noWarm {
		go s.warm()
	}
	return s, nil
}

// OpenTemp opens a store without fsync in a new temporary file, unlinked
// once open: the memory store of tests and demos (package memory).
func OpenTemp(opts ...Option) (*Store, error) {
	f, err := os.CreateTemp("", "plexus-store-*.db")
	if err != nil {
		return nil, err
	}
	path := f.Name()
	if err := f.Close(); err != nil {
		return nil, errors.Join(err, os.Remove(path))
	}
	s, err := Open(path, append(opts, WithNoSync(), WithoutWarmUp())...)
	if rerr := os.Remove(path); err == nil && rerr != nil {
		return nil, errors.Join(rerr, s.Close())
	}
	return s, err
}

// Ready implements store.Store: it waits until the index is built (half a
// second for a million allocations; commits wait for it too), and returns
// the error that stopped it, which every commit fails with.
func (s *Store) Ready(ctx context.Context) error {
	select {
	case <-s.indexed:
		return s.indexErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

// warm reads the file once, sequentially, to fill the page cache: after a
// cold boot, the allocator's first snapshot would read a page at random at
// a time (posix_fadvise WILLNEED reads one read-ahead window only).
func (s *Store) warm() {
	f, err := os.Open(s.path)
	if err != nil {
		s.logger.Warn("store warm-up failed", "path", s.path, "err", err)
		return
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for off := int64(0); !s.closed.Load(); off += int64(len(buf)) {
		if _, err := f.ReadAt(buf, off); err != nil {
			if !errors.Is(err, io.EOF) {
				s.logger.Warn("store warm-up failed", "path", s.path, "err", err)
			}
			return
		}
	}
}

// init creates the buckets of a new file, checks the format of an
// existing one, and loads the revision.
func (s *Store) init(tx *bbolt.Tx) error {
	meta := tx.Bucket(bucketMeta)
	if meta == nil {
		var err error
		if meta, err = tx.CreateBucket(bucketMeta); err != nil {
			return err
		}
		if err := meta.Put(keyFormat, []byte{fileFormat}); err != nil {
			return err
		}
	}
	if err := checkFormat(tx); err != nil {
		return err
	}
	for _, b := range [][]byte{bucketPools, bucketRecords, bucketQuarantine, bucketRequests} {
		if _, err := tx.CreateBucketIfNotExists(b); err != nil {
			return err
		}
	}
	s.rev = int64(getUint64(meta, keyRevision))
	s.allocs = int64(getUint64(meta, keyAllocs))
	return nil
}

// openFile opens the bbolt file of the store at path.
func openFile(path string, o options) (*bbolt.DB, error) {
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{
		Timeout:         o.lockTimeout,
		NoSync:          o.noSync,
		FreelistType:    bbolt.FreelistMapType,
		InitialMmapSize: mmapSize,
	})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("open store %s: file is locked by another process (waited %s)", path, o.lockTimeout)
	}
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	return db, nil
}

// buildIndex builds the index from the records in the file, and finds
// the next record number.
func (s *Store) buildIndex() error {
	l := newLoader(int(min(s.allocs, 1<<24)))
	s.seq = 1
	err := s.db.View(func(tx *bbolt.Tx) error {
		c := tx.Bucket(bucketRecords).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if len(k) != 8 {
				return fmt.Errorf("malformed record key %q", k)
			}
			seq := binary.BigEndian.Uint64(k)
			pool, addr, val, err := record.SplitRecord(v)
			if err != nil {
				return fmt.Errorf("record %d: %w", seq, err)
			}
			if err := l.add(pool, addr, seq, val); err != nil {
				return err
			}
			s.seq = seq + 1
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.index, err = l.build()
	return err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func getUint64(b *bbolt.Bucket, k []byte) uint64 {
	v := b.Get(k)
	if len(v) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(v)
}

func putUint64(b *bbolt.Bucket, k []byte, v uint64) error {
	return b.Put(k, binary.BigEndian.AppendUint64(nil, v))
}

// Path returns the file the store was opened from.
func (s *Store) Path() string { return s.path }

// view runs fn in a read transaction, mapping a closed database to
// store.ErrClosed.
func (s *Store) view(fn func(*bbolt.Tx) error) error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	err := s.db.View(fn)
	if errors.Is(err, berrors.ErrDatabaseNotOpen) {
		return store.ErrClosed
	}
	return err
}

// Snapshot implements store.Store. It reads everything in one bbolt read
// transaction, which sees one committed batch, so one revision.
func (s *Store) Snapshot(ctx context.Context) (*store.Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	snap := &store.Snapshot{}
	err := s.view(func(tx *bbolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		snap.Revision = int64(getUint64(meta, keyRevision))

		err := tx.Bucket(bucketPools).ForEach(func(k, v []byte) error {
			p, err := record.DecodePool(string(k), v)
			snap.Pools = append(snap.Pools, p)
			return err
		})
		if err != nil {
			return err
		}

		// The count is only a capacity hint; bound it by what the file
		// could hold, so a wrong count cannot cost more than it saves.
		hint := min(getUint64(meta, keyAllocs), uint64(tx.Size()/16))
		snap.Allocations = make([]store.Allocation, 0, hint)
		var ord order
		var shared record.Sharer
		n := 0
		c := tx.Bucket(bucketRecords).Cursor()
		for _, v := c.First(); v != nil; _, v = c.Next() {
			if n++; n%(1<<16) == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			pool, addr, val, err := record.SplitRecord(v)
			if err != nil {
				return err
			}
			a, err := record.DecodeAllocation(ord.add(pool, addr), addr, val)
			if err != nil {
				return err
			}
			shared.Share(&a)
			snap.Allocations = append(snap.Allocations, a)
		}
		ord.apply(snap.Allocations)
		pools := interner{}
		for _, id := range ord.pools {
			pools[id] = id
		}

		snap.Quarantine, err = quarantine(tx, pools)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", s.path, err)
	}
	return snap, nil
}

// StreamSnapshot implements store.Store on a Snapshot, whose order (pool
// by pool) keeps one pool's tables in the reader's cache.
func (s *Store) StreamSnapshot(ctx context.Context, pools func([]store.Pool, []int) error, alloc func(*store.Allocation) error) (int64, []store.Quarantine, error) {
	snap, err := s.Snapshot(ctx)
	if err != nil {
		return 0, nil, err
	}
	held := make([]int, len(snap.Pools))
	for i, k := 0, 0; i < len(snap.Allocations); i++ {
		for k < len(snap.Pools) && snap.Pools[k].ID < snap.Allocations[i].Pool {
			k++
		}
		if k < len(snap.Pools) && snap.Pools[k].ID == snap.Allocations[i].Pool {
			held[k]++
		}
	}
	if err := pools(snap.Pools, held); err != nil {
		return 0, nil, err
	}
	for i := range snap.Allocations {
		if err := alloc(&snap.Allocations[i]); err != nil {
			return 0, nil, err
		}
		snap.Allocations[i] = store.Allocation{} // let go of its strings as the reader goes
	}
	return snap.Revision, snap.Quarantine, nil
}

// quarantine reads every quarantine record, its pool id from ids.
func quarantine(tx *bbolt.Tx, ids interner) ([]store.Quarantine, error) {
	var qs []store.Quarantine
	c := tx.Bucket(bucketQuarantine).Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		pool, addr, err := splitAddrKey(k)
		if err != nil {
			return nil, err
		}
		q, err := record.DecodeQuarantine(ids.get(pool), addr, v)
		if err != nil {
			return nil, err
		}
		qs = append(qs, q)
	}
	return qs, nil
}

// Revision implements store.Store: the revision of the latest commit.
func (s *Store) Revision(context.Context) (int64, error) {
	var rev int64
	err := s.view(func(tx *bbolt.Tx) error {
		rev = int64(getUint64(tx.Bucket(bucketMeta), keyRevision))
		return nil
	})
	return rev, err
}

// PageAllocations implements store.Store, cut from a snapshot: each page
// reads the whole file (the allocator serves its lists from memory), and
// a rev but the current one is store.ErrCompacted.
func (s *Store) PageAllocations(ctx context.Context, rev int64, pool string, after store.AllocationKey, limit int) (store.Page, error) {
	if err := after.CheckAfter(pool); err != nil {
		return store.Page{}, err
	}
	snap, err := s.Snapshot(ctx)
	if err != nil {
		return store.Page{}, err
	}
	if rev != 0 && rev != snap.Revision {
		return store.Page{}, store.ErrCompacted
	}
	byKey := func(a store.Allocation, k store.AllocationKey) int {
		return cmp.Or(strings.Compare(a.Pool, k.Pool), a.Address.Compare(k.Address))
	}
	all := snap.Allocations
	if pool != "" { // pool+"\x00" sorts after pool and before every id after it (ids hold no NUL)
		lo, _ := slices.BinarySearchFunc(all, store.AllocationKey{Pool: pool}, byKey)
		hi, _ := slices.BinarySearchFunc(all, store.AllocationKey{Pool: pool + "\x00"}, byKey)
		all = all[lo:hi]
	}
	if after != (store.AllocationKey{}) {
		i, found := slices.BinarySearchFunc(all, after, byKey)
		if found {
			i++
		}
		all = all[i:]
	}
	page := store.Page{Revision: snap.Revision}
	if limit > 0 && len(all) > limit {
		all, page.More = all[:limit], true
	}
	page.Allocations = slices.Clone(all) // not the whole snapshot behind it
	return page, nil
}

// order puts a snapshot's allocations, read in the order their records
// were first written (each pool's mostly by address, the pools
// interleaved), in store.Snapshot's: it groups the pools with a stable
// counting sort and sorts only a pool out of order. Over 10,000 pools in
// random order this takes an eighth of a comparison sort's time.
type order struct {
	ids   map[string]int32
	pools []string // by id, in the order first read
	of    []int32  // the pool id of each allocation read
	last  netip.Addr
	mixed bool
}

// add notes an allocation of addr in pool and returns the pool's id
// as a string shared by all its allocations.
func (o *order) add(pool []byte, addr netip.Addr) string {
	if len(o.of) > 0 {
		prev := o.of[len(o.of)-1]
		if o.pools[prev] == string(pool) {
			o.of = append(o.of, prev)
			o.mixed = o.mixed || addr.Compare(o.last) <= 0
			o.last = addr
			return o.pools[prev]
		}
		o.mixed = o.mixed || string(pool) < o.pools[prev]
	}
	if o.ids == nil {
		o.ids = map[string]int32{}
	}
	id, ok := o.ids[string(pool)]
	if !ok {
		id = int32(len(o.pools))
		o.pools = append(o.pools, string(pool))
		o.ids[o.pools[id]] = id
	}
	o.of = append(o.of, id)
	o.last = addr
	return o.pools[id]
}

// apply puts allocs, the allocations added in that order, in order.
func (o *order) apply(allocs []store.Allocation) {
	if !o.mixed {
		return
	}
	// rank[id] is the pool's place among the pools by id.
	byName := make([]int32, len(o.pools))
	for i := range byName {
		byName[i] = int32(i)
	}
	slices.SortFunc(byName, func(a, b int32) int { return strings.Compare(o.pools[a], o.pools[b]) })
	rank := make([]int32, len(o.pools))
	for r, id := range byName {
		rank[id] = int32(r)
	}
	next := make([]int, len(o.pools)+1)
	for _, id := range o.of {
		next[rank[id]+1]++
	}
	for r := range o.pools {
		next[r+1] += next[r]
	}
	bounds := slices.Clone(next)
	to := o.of // becomes each allocation's place
	for i, id := range to {
		r := rank[id]
		to[i] = int32(next[r])
		next[r]++
	}
	permute(allocs, to)
	byAddress := func(x, y store.Allocation) int { return x.Address.Compare(y.Address) }
	for r := range o.pools {
		pool := allocs[bounds[r]:bounds[r+1]]
		if !slices.IsSortedFunc(pool, byAddress) {
			slices.SortFunc(pool, byAddress)
		}
	}
}

// permute moves allocs[i] to allocs[to[i]] for every i, in place, one
// swap per allocation out of place; to must be a permutation, and is
// consumed.
func permute(allocs []store.Allocation, to []int32) {
	for i := range allocs {
		for int(to[i]) != i {
			j := to[i]
			allocs[i], allocs[j] = allocs[j], allocs[i]
			to[i], to[j] = to[j], to[i]
		}
	}
}

// interner returns one string per pool id, so that a million
// allocations do not carry a million copies of their pool's id.
type interner map[string]string

func (i interner) get(b []byte) string {
	if s, ok := i[string(b)]; ok { // no allocation: the compiler looks up without a copy
		return s
	}
	s := string(b)
	i[s] = s
	return s
}

// GetRequest implements store.Store.
func (s *Store) GetRequest(ctx context.Context, id string) (store.Request, bool, error) {
	if err := ctx.Err(); err != nil {
		return store.Request{}, false, err
	}
	var (
		r  store.Request
		ok bool
	)
	err := s.view(func(tx *bbolt.Tx) error {
		v := tx.Bucket(bucketRequests).Get([]byte(id))
		if v == nil {
			return nil
		}
		var err error
		r, _, err = record.DecodeRequest(id, v)
		ok = err == nil
		return err
	})
	if err != nil {
		return store.Request{}, false, fmt.Errorf("get request %q: %w", id, err)
	}
	return r, ok, nil
}

// WatchCursor implements store.Store.
func (s *Store) WatchCursor(_ context.Context, fromRev int64, pool string) (store.Cursor, error) {
	if s.closed.Load() {
		return nil, store.ErrClosed
	}
	c, err := s.log.Cursor(fromRev, pool)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Compact drops the in-memory event history up to rev (tests).
func (s *Store) Compact(_ context.Context, rev int64) error {
	s.log.Compact(rev)
	return nil
}

// Stats counts the committer's work since Open: transactions taken,
// those that failed a condition, and bbolt write transactions (fsyncs).
type Stats struct{ Txns, Conflicts, Batches uint64 }

// Stats returns the committer's counters.
func (s *Store) Stats() Stats {
	return Stats{Txns: s.txns.Load(), Conflicts: s.conflicts.Load(), Batches: s.batches.Load()}
}

// Close commits what was already queued, ends every watch with
// store.ErrClosed and closes the file.
func (s *Store) Close() error {
	s.qmu.Lock()
	if s.closing {
		s.qmu.Unlock()
		<-s.stopped
		return nil
	}
	s.closing = true
	s.qmu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
	<-s.stopped
	close(s.stopSweep)
	<-s.swept
	s.closed.Store(true)
	s.log.Close(store.ErrClosed)
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close store %s: %w", s.path, err)
	}
	return nil
}

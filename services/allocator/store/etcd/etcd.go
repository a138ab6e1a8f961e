package etcd

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/plexusnet/plexus/services/allocator/store"
)

// DefaultPrefix is the key prefix of an installation that names none.
const DefaultPrefix = "/plexus/"

// DefaultDialTimeout bounds the connection to etcd at Open.
const DefaultDialTimeout = 5 * time.Second

const (
	// maxSendBytes is the largest request the client sends, above the 10
	// MiB etcd advises as --max-request-bytes: etcd's limit is the one a
	// commit meets.
	maxSendBytes = 16 << 20
	// snapshotPage is how many keys a read returns at most.
	snapshotPage = 5000
	// closeDrain bounds how long Close lets watchers deliver what was
	// committed before they end.
	closeDrain = 2 * time.Second
)

// DefaultHistory is how many events a store keeps in memory for its
// watches when Config.History is zero: etcd keeps the history itself, so
// this covers watchers a little behind, in a few MB.
const DefaultHistory = 10_000

// MaxHistory bounds --etcd-watch-history: ten million events are a few GB.
const MaxHistory = 10_000_000

// Config says how to reach etcd and where the installation's keys live.
type Config struct {
	// Endpoints are etcd client URLs, such as http://127.0.0.1:2379.
	Endpoints []string
	// Prefix is put before every key (DefaultPrefix when empty); a "/" is
	// added when it does not end with one. Installations that share an
	// etcd use different prefixes.
	Prefix string
	// TLS, when set, is used to reach etcd (https endpoints).
	TLS *tls.Config
	// DialTimeout bounds the first connection (DefaultDialTimeout when
	// zero).
	DialTimeout time.Duration
	// Logger is the store's logger (slog.Default when nil).
	Logger *slog.Logger
	// History is how many events the store keeps in memory for the
	// watches that share its etcd watch (feed.go): DefaultHistory when
	// zero; negative gives every watch an etcd watch of its own.
	History int
	// ObserveCombined, when set, is told the number of commits of every
	// combined transaction (combine.go), for a metric.
	ObserveCombined func(commits int)
}

// Store is a store.Store kept in etcd. Several allocator replicas open a
// Store on the same endpoints and prefix and share its data.
type Store struct {
	cli      *clientv3.Client
	kv       pb.KVClient // the client's, for commits (txn.go)
	k        keys
	logger   *slog.Logger
	combine  *combiner
	requests requestLeases // of request records (requests.go)

	lastCommit atomic.Int64 // the latest revision this store committed

	// pageSize is snapshotPage (tests set less); observeRead, when set,
	// is told of every windowed read (tests).
	pageSize    int
	observeRead func(from, end string, rev int64)
	widths      widths // the pools' latest windows (window.go)

	// history is Config.History; feed is the shared etcd watch, started
	// by the first watch (feed.go).
	history int
	feedMu  sync.Mutex
	feed    *feed

	mu       sync.Mutex
	closed   bool
	closing  chan struct{} // closed by Close
	closeRev int64         // what watchers deliver before ErrClosed
	watchers sync.WaitGroup
}

var _ store.Store = (*Store)(nil)

// Open connects to etcd. It does not wait for etcd to answer: the first
// request does, within its context.
func Open(cfg Config) (*Store, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("etcd store: no endpoints")
	}
	for _, ep := range cfg.Endpoints {
		if ep == "" {
			return nil, errors.New("etcd store: empty endpoint")
		}
	}
	prefix := cfg.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.Endpoints,
		TLS:         cfg.TLS,
		DialTimeout: cfg.DialTimeout,
		// Keep-alives notice a dead connection to a member that vanished
		// without closing it, so requests move to another endpoint.
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		// etcd's --max-request-bytes bounds a commit, not the client's
		// default of 2 MiB: a large batch on an etcd that allows it goes.
		MaxCallSendMsgSize: maxSendBytes,
		// The client's own logger repeats every retry; the store reports
		// what matters through slog and readiness.
		Logger: zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd store: connect to %s: %w", strings.Join(cfg.Endpoints, ","), err)
	}
	s := &Store{cli: cli, kv: clientv3.RetryKVClient(cli), k: keys{prefix: prefix}, logger: cfg.Logger, closing: make(chan struct{}),
		requests: requestLeases{retention: store.DefaultRequestRetention}, history: cmp.Or(cfg.History, DefaultHistory),
		pageSize: snapshotPage}
	s.combine = &combiner{s: s, observe: cfg.ObserveCombined}
	return s, nil
}

// Prefix returns the prefix of the store's keys.
func (s *Store) Prefix() string { return s.k.prefix }

func (s *Store) isClosed() bool {
	select {
	case <-s.closing:
		return true
	default:
		return false
	}
}

// Snapshot implements store.Store: pools, allocations and quarantine
// records read at one revision, in pages.
func (s *Store) Snapshot(ctx context.Context) (*store.Snapshot, error) {
	snap := &store.Snapshot{}
	var err error
	snap.Revision, snap.Quarantine, err = s.StreamSnapshot(ctx,
		func(ps []store.Pool, _ []int) error { snap.Pools = ps; return nil },
		func(a *store.Allocation) error { snap.Allocations = append(snap.Allocations, *a); return nil })
	if err != nil {
		return nil, err
	}
	return snap, nil
}

// StreamSnapshot implements store.Store: each allocation handed over as
// it is decoded.
func (s *Store) StreamSnapshot(ctx context.Context, pools func([]store.Pool, []int) error, alloc func(*store.Allocation) error) (int64, []store.Quarantine, error) {
	if s.isClosed() {
		return 0, nil, store.ErrClosed
	}
	var ps []store.Pool
	// The first read fixes the revision; the rest are read at it.
	r := s.ranger(s.k.pools(), 0)
	if _, _, err := r.read(ctx, s.k.pools(), rangeEnd(s.k.pools()), 0, keyed(func(kv *mvccpb.KeyValue) error {
		p, err := s.k.decodePool(kv)
		ps = append(ps, p)
		return err
	})); err != nil {
		return 0, nil, s.readError(ctx, "snapshot pools", err)
	}
	rev := r.rev
	if err := pools(ps, make([]int, len(ps))); err != nil {
		return 0, nil, err
	}
	ids := make([]string, len(ps))
	for i, p := range ps {
		ids[i] = p.ID // in key order, which is the order of their segments
	}
	var dec allocDecoder
	if err := s.scanPools(ctx, s.k.prefix+keyAllocs, rev, ids, func(kv *mvccpb.KeyValue) error {
		a, err := dec.decode(kv)
		if err != nil {
			return err
		}
		return alloc(&a)
	}); err != nil {
		return 0, nil, s.readError(ctx, "snapshot allocations", err)
	}
	var qs []store.Quarantine
	if err := s.scanPools(ctx, s.k.prefix+keyQuarantine, rev, ids, func(kv *mvccpb.KeyValue) error {
		q, err := s.k.decodeQuarantine(kv)
		if err == nil {
			qs = append(qs, q)
		}
		return err
	}); err != nil {
		return 0, nil, s.readError(ctx, "snapshot quarantine", err)
	}
	return rev, qs, nil
}

// scanPools calls fn for every key of base's kind at rev, in key order,
// in windows (window.go); ids are the pools known at rev, sorted.
func (s *Store) scanPools(ctx context.Context, base string, rev int64, ids []string, fn func(*mvccpb.KeyValue) error) error {
	r := s.ranger(base, rev)
	r.bound = poolBounds(base, ids)
	_, _, err := r.read(ctx, base, rangeEnd(base), 0, keyed(fn))
	return err
}

// keyed names the key in fn's errors.
func keyed(fn func(*mvccpb.KeyValue) error) func(*mvccpb.KeyValue) error {
	return func(kv *mvccpb.KeyValue) error {
		if err := fn(kv); err != nil {
			return fmt.Errorf("%q: %w", kv.Key, err)
		}
		return nil
	}
}

// page reads up to limit keys of [from, end) at revision rev (the current
// one when 0).
func (s *Store) page(ctx context.Context, from, end string, rev int64, limit int, more ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	opts := append([]clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(int64(limit))}, more...)
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	return s.cli.Get(ctx, from, opts...)
}

// after is the first key that sorts after key.
func after(key []byte) string { return string(key) + "\x00" }

// PageAllocations implements store.Store, read in windows at rev.
func (s *Store) PageAllocations(ctx context.Context, rev int64, pool string, from store.AllocationKey, limit int) (store.Page, error) {
	if s.isClosed() {
		return store.Page{}, store.ErrClosed
	}
	if limit <= 0 || limit > snapshotPage {
		limit = snapshotPage
	}
	base := s.k.prefix + keyAllocs
	within := base
	if pool != "" {
		within = s.k.poolAllocs(pool)
	}
	r := s.ranger(base, rev)
	start := within
	if err := from.CheckAfter(pool); err != nil {
		return store.Page{}, err
	}
	if from.Pool != "" {
		start = after([]byte(s.k.alloc(from.Pool, from.Address)))
		// The first window is the pool's latest, or assumes every
		// address held, the densest the pool can be; the next ones are
		// sized from what it holds.
		r.at(from.Pool, from.Address, s.widths.of(from.Pool, from.Address, log2Floor(float64(r.page))))
	}
	if pool == "" {
		r.bound = s.poolsAt(base, rev)
	}
	pg := store.Page{Allocations: make([]store.Allocation, 0, limit)}
	var dec allocDecoder
	_, more, err := r.read(ctx, start, rangeEnd(within), limit, keyed(func(kv *mvccpb.KeyValue) error {
		a, err := dec.decode(kv)
		if err == nil {
			pg.Allocations = append(pg.Allocations, a)
		}
		return err
	}))
	if err != nil {
		return store.Page{}, s.readError(ctx, "page allocations", err)
	}
	pg.Revision, pg.More = r.rev, more
	return pg, nil
}

// poolsAt is a ranger's bound over the pools as they were at rev (0: the
// ranger's first read's), read a batch at a time as the ranger gets to
// them.
func (s *Store) poolsAt(base string, rev int64) func(context.Context, string) (string, error) {
	const batch = 256
	var (
		ends []string // of the pools read, sorted
		next string   // the pool key the next batch starts at
		done bool     // the last batch reached the last pool
	)
	return func(ctx context.Context, pos string) (string, error) {
		for {
			i := sort.SearchStrings(ends, pos)
			for i < len(ends) && ends[i] <= pos {
				i++
			}
			if i < len(ends) {
				return ends[i], nil
			}
			if done {
				return "", nil
			}
			if next == "" {
				// The pools from the one pos is in on (pool ids hold
				// neither NUL nor \x01, which end a segment's pool).
				id := strings.TrimPrefix(pos, base)
				if k := strings.IndexAny(id, "\x00\x01"); k >= 0 {
					id = id[:k]
				}
				next = s.k.pool(id)
			}
			resp, err := s.page(ctx, next, rangeEnd(s.k.pools()), rev, batch, clientv3.WithKeysOnly())
			if err != nil {
				return "", err
			}
			ends = ends[:0]
			for _, kv := range resp.Kvs {
				ends = append(ends, base+strings.TrimPrefix(string(kv.Key), s.k.pools())+"\x01")
				next = after(kv.Key)
			}
			done = !resp.More || len(resp.Kvs) == 0
		}
	}
}

func (s *Store) readError(ctx context.Context, what string, err error) error {
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("%s: %w", what, ctx.Err())
	case s.isClosed():
		return fmt.Errorf("%s: %w", what, store.ErrClosed)
	case errors.Is(err, rpctypes.ErrCompacted):
		// Compacted between two pages: the caller reads again.
		return fmt.Errorf("%s: %w: %w", what, store.ErrCompacted, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// GetRequest implements store.Store.
func (s *Store) GetRequest(ctx context.Context, id string) (store.Request, bool, error) {
	if s.isClosed() {
		return store.Request{}, false, store.ErrClosed
	}
	resp, err := s.cli.Get(ctx, s.k.request(id))
	if err != nil {
		return store.Request{}, false, s.readError(ctx, "get request "+id, err)
	}
	if len(resp.Kvs) == 0 {
		return store.Request{}, false, nil
	}
	kv := resp.Kvs[0]
	r, err := decodeRequest(id, kv)
	if err != nil {
		return store.Request{}, false, err
	}
	return r, true, nil
}

// Revision returns the revision of the latest commit to the store by
// any replica (0 before the first).
func (s *Store) Revision(ctx context.Context) (int64, error) {
	if s.isClosed() {
		return 0, store.ErrClosed
	}
	resp, err := s.cli.Get(ctx, s.k.markers(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return 0, s.readError(ctx, "read revision", err)
	}
	var last int64
	for _, kv := range resp.Kvs {
		last = max(last, kv.ModRevision)
	}
	return last, nil
}

// Ready reports whether the store can commit: one linearizable count of a
// key, which etcd answers only once its leader has confirmed with a quorum
// that it still leads, sent the way the store's own requests go. (Status
// per endpoint waits for the endpoint it names, so one member down made
// every replica unready while etcd had quorum.)
func (s *Store) Ready(ctx context.Context) error {
	if s.isClosed() {
		return store.ErrClosed
	}
	if _, err := s.cli.Get(ctx, s.k.marker(0), clientv3.WithCountOnly()); err != nil {
		if s.isClosed() {
			return store.ErrClosed
		}
		return fmt.Errorf("etcd not ready: no quorum answered through %s: %w", strings.Join(s.cli.Endpoints(), ","), err)
	}
	return nil
}

// Compact drops etcd's history before rev, for every prefix of the
// cluster (tests; production etcd compacts itself): a watch from rev
// still works, one from before gets store.ErrCompacted.
func (s *Store) Compact(ctx context.Context, rev int64) error {
	resp, err := s.cli.Get(ctx, s.k.markers(), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return fmt.Errorf("compact: %w", err)
	}
	at := min(rev, resp.Header.Revision)
	if _, err := s.cli.Compact(ctx, at); err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
		return fmt.Errorf("compact at %d: %w", at, err)
	}
	// The shared watch's history goes too, as etcd's would from a
	// watch's point of view.
	s.feedMu.Lock()
	if s.feed != nil {
		s.feed.log.Compact(at)
	}
	s.feedMu.Unlock()
	return nil
}

// Close implements store.Store. Watchers first get the events of the
// commits this store made (for up to closeDrain), then store.ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.closeRev = s.lastCommit.Load()
	close(s.closing)
	s.mu.Unlock()
	s.watchers.Wait()
	if err := s.cli.Close(); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("close etcd client: %w", err)
	}
	return nil
}

package watch

import (
	"cmp"
	"container/list"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"
)

// Key names a Service.
type Key struct {
	Namespace string
	Name      string
}

func compareKeys(a, b Key) int {
	return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
}

// EventType says what an Event means.
type EventType int

// Event types, in the order of the protocol's enum.
const (
	// SnapshotStart opens a snapshot: the subscriber forgets what it knew.
	SnapshotStart EventType = iota + 1
	// SnapshotEnd closes a snapshot.
	SnapshotEnd
	// Upsert carries a Service's current value.
	Upsert
	// Delete says the Service is gone or no longer matches the filter.
	Delete
)

// ErrTooSlow ends a subscription whose subscriber fell hopelessly behind.
var ErrTooSlow = errors.New("watcher fell too far behind")

// ErrClosed ends a subscription that its owner closed.
var ErrClosed = errors.New("subscription closed")

// Change is one change of a Service, as the publisher observed it.
type Change[V any] struct {
	Key Key
	// Present is false when the Service is gone; Value is then ignored.
	Present bool
	Value   V
	// Exported says whether the Service is exported (has a ServiceExport).
	Exported bool
	// ObserveTime is when the change that produced the value was observed.
	ObserveTime time.Time
	// TraceContext is the propagated trace context of that observation.
	// The Hub keeps the map and hands it out as is: do not change it later.
	TraceContext map[string]string
}

// Event is what a subscriber receives.
type Event[V any] struct {
	Type EventType
	// Key is unset for SnapshotStart and SnapshotEnd.
	Key Key
	// Value is set for Upsert only. Values are shared between subscribers
	// and must not be changed.
	Value V
	// Revision is the change's revision. Every event of a snapshot carries
	// the Hub's revision the snapshot was taken at: a subscriber cut off in
	// the middle of a snapshot must not resume from a revision that would
	// skip the rest of it, so it may only resume once SnapshotEnd arrived.
	Revision     uint64
	ObserveTime  time.Time
	TraceContext map[string]string
}

// Filter selects the Services a subscriber sees.
type Filter struct {
	// Namespace, when set, keeps only that namespace's Services.
	Namespace string
	// ExportedOnly keeps only exported Services.
	ExportedOnly bool
}

func (f Filter) matches(namespace string, present, exported bool) bool {
	return present && (f.Namespace == "" || f.Namespace == namespace) && (!f.ExportedOnly || exported)
}

// Position is where a subscriber wants to start: after Revision of Epoch. The
// zero Position asks for a snapshot.
type Position struct {
	Epoch    string
	Revision uint64
}

// Defaults of the Hub's options.
const (
	DefaultHistory    = 1 << 16
	DefaultMaxPending = 1 << 14
	DefaultMaxLag     = 30 * time.Second
)

// Option configures a Hub.
type Option func(*options)

type options struct {
	history    int
	maxPending int
	maxLag     time.Duration
	now        func() time.Time
	epoch      string
}

// WithHistory sets how many changes the Hub remembers for resuming
// (DefaultHistory). A record costs a few dozen bytes: it holds a key and a
// revision, not the value.
func WithHistory(n int) Option { return func(o *options) { o.history = max(n, 1) } }

// WithMaxPending sets how many Services may wait in one subscriber's queue
// before the subscriber is cut off (DefaultMaxPending).
func WithMaxPending(n int) Option { return func(o *options) { o.maxPending = max(n, 1) } }

// WithMaxLag sets how long a subscriber may leave a non-empty queue
// untouched before it is cut off (DefaultMaxLag).
func WithMaxLag(d time.Duration) Option { return func(o *options) { o.maxLag = d } }

// WithClock sets the clock that measures lag (tests).
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// WithEpoch sets the epoch instead of a random one (tests).
func WithEpoch(epoch string) Option { return func(o *options) { o.epoch = epoch } }

// Hub numbers changes and fans them out to subscribers. It is safe for
// concurrent use.
type Hub[V any] struct {
	opts options

	mu  sync.Mutex
	rev uint64
	// last holds the latest entry of every present Service, and of deleted
	// ones while their deletion is still in the history.
	last map[Key]*entry[V]
	// ring is the history, oldest first from head.
	ring  []record
	head  int
	count int
	// floor is the newest revision that fell out of the history: a
	// subscriber can resume from floor or later.
	floor uint64
	subs  map[*Subscription[V]]struct{}
}

type entry[V any] struct {
	key      Key
	present  bool
	exported bool
	value    V
	rev      uint64
	observe  time.Time
	trace    map[string]string
}

// record is one change in the history.
type record struct {
	key Key
	rev uint64
}

// New returns an empty Hub with a new epoch.
func New[V any](opts ...Option) *Hub[V] {
	o := options{history: DefaultHistory, maxPending: DefaultMaxPending, maxLag: DefaultMaxLag, now: time.Now}
	for _, opt := range opts {
		opt(&o)
	}
	if o.epoch == "" {
		b := make([]byte, 8)
		_, _ = rand.Read(b) // crypto/rand.Read never fails
		o.epoch = hex.EncodeToString(b)
	}
	return &Hub[V]{
		opts: o,
		last: map[Key]*entry[V]{},
		ring: make([]record, o.history),
		subs: map[*Subscription[V]]struct{}{},
	}
}

// Epoch returns the Hub's epoch.
func (h *Hub[V]) Epoch() string { return h.opts.epoch }

// Revision returns the revision of the latest change.
func (h *Hub[V]) Revision() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rev
}

// Get returns the current value of a Service, the revision of its latest
// change and the Hub's revision, or ok false when the Service is not there.
func (h *Hub[V]) Get(k Key) (value V, exported bool, rev, hubRev uint64, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.last[k]
	if e == nil || !e.present {
		return value, false, 0, h.rev, false
	}
	return e.value, e.exported, e.rev, h.rev, true
}

// Len returns the number of Services present.
func (h *Hub[V]) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, e := range h.last {
		if e.present {
			n++
		}
	}
	return n
}

// Subscribers returns the number of open subscriptions.
func (h *Hub[V]) Subscribers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

// Publish records a change and queues it for every interested subscriber,
// without waiting for any of them. It returns the change's revision, or the
// current revision when the change is the deletion of an unknown Service,
// which is dropped. Deciding whether a value really changed is the
// publisher's job: every call makes a revision.
func (h *Hub[V]) Publish(c Change[V]) uint64 {
	now := h.opts.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	prev := h.last[c.Key]
	prevPresent := prev != nil && prev.present
	prevExported := prevPresent && prev.exported
	if !c.Present && !prevPresent {
		return h.rev
	}
	h.rev++
	e := &entry[V]{key: c.Key, present: c.Present, exported: c.Present && c.Exported, rev: h.rev,
		observe: c.ObserveTime, trace: c.TraceContext}
	if c.Present {
		e.value = c.Value
	}
	h.last[c.Key] = e
	h.remember(record{key: c.Key, rev: h.rev})
	for s := range h.subs {
		if !s.offer(e, prevPresent, prevExported, now) {
			delete(h.subs, s)
		}
	}
	return h.rev
}

// remember appends a record to the history, dropping the oldest one when it
// is full, and with it a deleted Service's tombstone that nothing can ask
// for any more.
func (h *Hub[V]) remember(r record) {
	n := len(h.ring)
	if h.count == n {
		old := h.ring[h.head]
		h.floor = old.rev
		if e := h.last[old.key]; e != nil && !e.present && e.rev == old.rev {
			delete(h.last, old.key)
		}
		h.ring[h.head] = r
		h.head = (h.head + 1) % n
		return
	}
	h.ring[(h.head+h.count)%n] = r
	h.count++
}

// Subscribe opens a subscription. From a Position of this Hub's epoch whose
// revision is still in the history it resumes: Pending events bring the
// subscriber up to date. Otherwise the subscription starts with a snapshot
// (Snapshot) of the Services matching the filter.
func (h *Hub[V]) Subscribe(f Filter, from Position) *Subscription[V] {
	now := h.opts.now()
	s := &Subscription[V]{
		hub:     h,
		filter:  f,
		pending: map[Key]*list.Element{},
		ready:   make(chan struct{}, 1),
		done:    make(chan struct{}),
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.resume(s, from, now) {
		s.snapshot = h.snapshot(f)
	}
	h.subs[s] = struct{}{}
	return s
}

// resume queues for s what it missed since from, and reports whether that
// was possible. The caller holds h.mu.
//
// Every Service changed after from is sent as it is now: an Upsert when it
// matches the filter, otherwise a Delete (unless the filter's namespace
// rules it out). What the subscriber saw of it cannot be told from the
// history: its queue coalesced changes and sent them in the order of their
// latest revision, so an event it received may be newer than its position
// (a Service changed at 2 and again at 5 went out after another changed at
// 3). A Delete of a Service it does not have changes nothing for it.
func (h *Hub[V]) resume(s *Subscription[V], from Position, now time.Time) bool {
	if from.Revision == 0 || from.Epoch != h.opts.epoch || from.Revision > h.rev || from.Revision < h.floor {
		return false
	}
	changed := map[Key]bool{}
	n := len(h.ring)
	for i := range h.count {
		r := h.ring[(h.head+i)%n]
		if r.rev > from.Revision {
			changed[r.key] = true
		}
	}
	if len(changed) > h.opts.maxPending {
		return false
	}
	latest := make([]*entry[V], 0, len(changed))
	for k := range changed {
		latest = append(latest, h.last[k])
	}
	slices.SortFunc(latest, func(a, b *entry[V]) int { return cmp.Compare(a.rev, b.rev) })
	s.resumed = true
	for _, e := range latest {
		s.offer(e, true, true, now)
	}
	return true
}

// snapshot returns the snapshot events of the Services matching f, sorted
// by key. The caller holds h.mu.
func (h *Hub[V]) snapshot(f Filter) []Event[V] {
	out := []Event[V]{{Type: SnapshotStart, Revision: h.rev}}
	for _, e := range h.last {
		if f.matches(e.key.Namespace, e.present, e.exported) {
			ev := e.event(Upsert)
			ev.Revision = h.rev
			out = append(out, ev)
		}
	}
	slices.SortFunc(out[1:], func(a, b Event[V]) int { return compareKeys(a.Key, b.Key) })
	return append(out, Event[V]{Type: SnapshotEnd, Revision: h.rev})
}

func (e *entry[V]) event(t EventType) Event[V] {
	ev := Event[V]{Type: t, Key: e.key, Revision: e.rev, ObserveTime: e.observe, TraceContext: e.trace}
	if t == Upsert {
		ev.Value = e.value
	}
	return ev
}

// Subscription is one subscriber's view of a Hub: an optional snapshot, then
// a queue of changes.
type Subscription[V any] struct {
	hub      *Hub[V]
	filter   Filter
	snapshot []Event[V]
	resumed  bool
	ready    chan struct{}
	done     chan struct{}

	mu      sync.Mutex
	pending map[Key]*list.Element
	order   list.List // of pendingItem, oldest revision first
	// waitingSince is when the queue was last empty or last drained.
	waitingSince time.Time
	err          error
}

type pendingItem[V any] struct {
	typ EventType
	e   *entry[V]
}

// Snapshot returns the snapshot the subscription starts with (between a
// SnapshotStart and a SnapshotEnd), or nil when it resumed. It does not
// change; send it before the first Next.
func (s *Subscription[V]) Snapshot() []Event[V] { return s.snapshot }

// Resumed reports whether the subscription resumed from its Position rather
// than starting with a snapshot.
func (s *Subscription[V]) Resumed() bool { return s.resumed }

// Ready receives a value when events may be waiting.
func (s *Subscription[V]) Ready() <-chan struct{} { return s.ready }

// Done is closed when the subscription ended; Err says why.
func (s *Subscription[V]) Done() <-chan struct{} { return s.done }

// Err returns ErrTooSlow or ErrClosed once the subscription ended, nil
// before.
func (s *Subscription[V]) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Next appends up to max waiting events to buf, oldest revision first, and
// returns it.
func (s *Subscription[V]) Next(buf []Event[V], max int) []Event[V] {
	now := s.hub.opts.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for n := 0; n < max && s.order.Len() > 0; n++ {
		it := s.order.Remove(s.order.Front()).(pendingItem[V])
		delete(s.pending, it.e.key)
		buf = append(buf, it.e.event(it.typ))
	}
	s.waitingSince = now
	if s.order.Len() > 0 {
		s.signal()
	}
	return buf
}

// Pending returns the number of Services waiting in the queue.
func (s *Subscription[V]) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.order.Len()
}

// Close ends the subscription. Closing twice is harmless.
func (s *Subscription[V]) Close() {
	s.hub.mu.Lock()
	delete(s.hub.subs, s)
	s.hub.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.end(ErrClosed)
}

// offer queues the change e for the subscriber if it matters to it, and
// reports whether the subscription is still open. A Service that matched
// before the change and does not after is queued as a deletion.
func (s *Subscription[V]) offer(e *entry[V], prevPresent, prevExported bool, now time.Time) bool {
	typ := Upsert
	switch {
	case s.filter.matches(e.key.Namespace, e.present, e.exported):
	case s.filter.matches(e.key.Namespace, prevPresent, prevExported):
		typ = Delete
	default:
		// The subscriber did not see the Service before and does not now;
		// nothing of it can be waiting either, since a waiting entry means
		// the previous state matched.
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return false
	}
	if el, ok := s.pending[e.key]; ok {
		s.order.Remove(el)
	} else if s.order.Len() == 0 {
		s.waitingSince = now
	}
	s.pending[e.key] = s.order.PushBack(pendingItem[V]{typ: typ, e: e})
	if s.order.Len() > s.hub.opts.maxPending || now.Sub(s.waitingSince) > s.hub.opts.maxLag {
		s.end(ErrTooSlow)
		return false
	}
	s.signal()
	return true
}

// end closes the subscription with err. The caller holds s.mu.
func (s *Subscription[V]) end(err error) {
	if s.err != nil {
		return
	}
	s.err = err
	s.pending = nil
	s.order.Init()
	close(s.done)
}

func (s *Subscription[V]) signal() {
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

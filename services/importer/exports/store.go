package exports

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/util/validation"

	membershipv1 "github.com/plexusnet/plexus/api/membership/v1"
)

// Errors of the Store.
var (
	// ErrInvalidName means a service name is not
	// "namespaces/{namespace}/services/{name}" with valid parts.
	ErrInvalidName = errors.New("service name must look like namespaces/{namespace}/services/{name}")
	// ErrNoEndpoints means an update carries no endpoint set.
	ErrNoEndpoints = errors.New("update carries no endpoint set")
	// ErrNotExported means the endpoint set does not say the service is
	// exported.
	ErrNotExported = errors.New("the service is not exported")
)

// Key names a clusterset service.
type Key struct {
	Namespace string
	Name      string
}

// String returns "namespace/name".
func (k Key) String() string { return k.Namespace + "/" + k.Name }

// Compare orders keys by namespace, then name.
func (k Key) Compare(o Key) int {
	return cmp.Or(strings.Compare(k.Namespace, o.Namespace), strings.Compare(k.Name, o.Name))
}

// ServiceName returns the membership resource name of the exported
// service, "namespaces/{namespace}/services/{name}".
func (k Key) ServiceName() string { return "namespaces/" + k.Namespace + "/services/" + k.Name }

// ParseServiceName reads "namespaces/{namespace}/services/{name}"; the
// namespace must be a DNS label and the name a DNS-1035 label, as a
// Service's name must be.
func ParseServiceName(name string) (Key, error) {
	parts := strings.Split(name, "/")
	if len(parts) != 4 || parts[0] != "namespaces" || parts[2] != "services" {
		return Key{}, fmt.Errorf("%q: %w", name, ErrInvalidName)
	}
	if msgs := validation.IsDNS1123Label(parts[1]); len(msgs) > 0 {
		return Key{}, fmt.Errorf("%q: namespace: %s: %w", name, strings.Join(msgs, "; "), ErrInvalidName)
	}
	if msgs := validation.IsDNS1035Label(parts[3]); len(msgs) > 0 {
		return Key{}, fmt.Errorf("%q: name: %s: %w", name, strings.Join(msgs, "; "), ErrInvalidName)
	}
	return Key{Namespace: parts[1], Name: parts[3]}, nil
}

// Origin says where an export came from.
type Origin string

// Origins of an export.
const (
	// OriginWatch is a configured source's WatchServices stream.
	OriginWatch Origin = "watch"
	// OriginPush is the ApplyImport API.
	OriginPush Origin = "push"
)

// Update is one cluster's endpoint set of one service, as received.
type Update struct {
	// Endpoints is the full endpoint set; the Store keeps it as it is, so
	// the caller must not modify it afterwards.
	Endpoints *membershipv1.ServiceEndpoints
	// Revision is the source's revision of the change (0 for pushes).
	Revision uint64
	// ObserveTime is when the change was observed at the source; zero
	// means unknown (the receive time is used).
	ObserveTime time.Time
	// TraceContext is the W3C trace context of the change, if any.
	TraceContext map[string]string
}

// Export is one cluster's contribution to one service.
type Export struct {
	// Cluster is the source cluster.
	Cluster string
	// Origin is where the contribution came from.
	Origin Origin
	// Endpoints is the endpoint set; shared, never modified.
	Endpoints *membershipv1.ServiceEndpoints
	// Revision is the revision of the last update received.
	Revision uint64
	// ObserveTime is the observation time of the last change.
	ObserveTime time.Time
	// ReceiveTime is when the last update arrived.
	ReceiveTime time.Time
	// Generation counts the changes of the contribution in this process.
	Generation uint64
	// Ranges are the address ranges the cluster declares (SetRanges);
	// none: any address. Shared, never modified.
	Ranges []netip.Prefix
}

// Service is the exports of one service, sorted by cluster.
type Service struct {
	Key     Key
	Exports []Export
}

// Export returns the export of cluster, if any.
func (s Service) Export(cluster string) (Export, bool) {
	i, ok := slices.BinarySearchFunc(s.Exports, cluster, func(e Export, c string) int { return strings.Compare(e.Cluster, c) })
	if !ok {
		return Export{}, false
	}
	return s.Exports[i], true
}

// SourceState is what the Store knows about a configured source cluster.
type SourceState struct {
	// Synced is true once the source delivered a complete snapshot in this
	// process; from then on its exports are its own last word, even while
	// it is unreachable.
	Synced bool
	// Connected is true while the source's stream is up.
	Connected bool
	// LastHeard is when the source was last known to be reachable: the
	// last event, or the moment its stream was last known to be up.
	LastHeard time.Time
	// Departed is true once the cluster left the fleet and its exports
	// were withdrawn (RemoveSource): what remains of it (slices) is
	// orphaned, and it is no longer a source.
	Departed bool
}

// Change is one cluster's change to one service's exports, as the Store
// reports it: what the reconcile that writes it measures its latency from
// (Observed) and links its span to (TraceContext).
type Change struct {
	Key     Key
	Cluster string
	// Observed is when the change was observed where it happened (the
	// source's observation time, or when the Store took it).
	Observed time.Time
	// TraceContext is the change's W3C trace context, if it carried one.
	TraceContext map[string]string
}

type service struct {
	exports map[string]*Export
}

// Store holds the exports. It is safe for concurrent use.
type Store struct {
	notify func(Change)
	now    func() time.Time

	mu        sync.RWMutex
	services  map[Key]*service
	byCluster map[string]map[Key]struct{}
	sources   map[string]*SourceState
	ranges    map[string][]netip.Prefix
}

// Option configures a Store.
type Option func(*Store)

// WithClock replaces time.Now (tests).
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

// New returns an empty Store that calls notify (which must not block for
// long and must not call back into the Store) with every change to a
// service's exports.
func New(notify func(Change), opts ...Option) *Store {
	if notify == nil {
		notify = func(Change) {}
	}
	s := &Store{
		notify:    notify,
		now:       time.Now,
		services:  map[Key]*service{},
		byCluster: map[string]map[Key]struct{}{},
		sources:   map[string]*SourceState{},
		ranges:    map[string][]netip.Prefix{},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// AddSource registers a configured (watched) source cluster; a cluster
// that departed starts again as a new source.
func (s *Store) AddSource(cluster string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.sources[cluster]; !ok || st.Departed {
		s.sources[cluster] = &SourceState{}
	}
}

// RemoveSource withdraws every export a source cluster made through its
// stream, for a cluster that left the fleet, and marks it departed: its
// slices are then orphans to remove, not a source's that is merely out of
// reach. It returns how many services changed.
func (s *Store) RemoveSource(cluster string) int {
	s.mu.Lock()
	st, ok := s.sources[cluster]
	if !ok {
		s.mu.Unlock()
		return 0
	}
	now := s.now()
	var changed []Change
	for key := range s.byCluster[cluster] {
		if e := s.services[key].exports[cluster]; e == nil || e.Origin != OriginWatch {
			continue
		}
		if ch, ok := s.withdrawLocked(cluster, key, now, nil); ok {
			changed = append(changed, ch)
		}
	}
	*st = SourceState{Synced: true, Departed: true, LastHeard: st.LastHeard}
	s.mu.Unlock()
	for _, ch := range changed {
		s.notify(ch)
	}
	return len(changed)
}

// SetRanges sets the address ranges cluster declares (none: any
// address): its exports carry them, and each of its services is reported
// changed when they change, so that its slices are planned again.
func (s *Store) SetRanges(cluster string, ranges []netip.Prefix) {
	ranges = slices.Clone(ranges)
	s.mu.Lock()
	if slices.Equal(s.ranges[cluster], ranges) {
		s.mu.Unlock()
		return
	}
	if len(ranges) == 0 {
		delete(s.ranges, cluster)
	} else {
		s.ranges[cluster] = ranges
	}
	now := s.now()
	var changed []Change
	for key := range s.byCluster[cluster] {
		prev := s.services[key].exports[cluster]
		e := *prev
		e.Ranges = ranges
		s.services[key].exports[cluster] = &e
		changed = append(changed, Change{Key: key, Cluster: cluster, Observed: now})
	}
	s.mu.Unlock()
	for _, ch := range changed {
		s.notify(ch)
	}
}

// Exported returns how many services cluster exports.
func (s *Store) Exported(cluster string) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.byCluster[cluster])
}

// IsSource reports whether cluster is a configured source (one that has
// not departed).
func (s *Store) IsSource(cluster string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	st, ok := s.sources[cluster]
	return ok && !st.Departed
}

// Source returns the state of a configured source.
func (s *Store) Source(cluster string) (SourceState, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	st, ok := s.sources[cluster]
	if !ok {
		return SourceState{}, false
	}
	return *st, true
}

// Sources returns the states of every configured source.
func (s *Store) Sources() map[string]SourceState {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(map[string]SourceState, len(s.sources))
	for c, st := range s.sources {
		out[c] = *st
	}
	return out
}

// SetConnected records that a source's stream went up or down at time at.
func (s *Store) SetConnected(cluster string, connected bool, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.sources[cluster]
	if !ok {
		return
	}
	st.Connected = connected
	if at.After(st.LastHeard) {
		st.LastHeard = at
	}
}

// Heard records that a source was heard from at time at.
func (s *Store) Heard(cluster string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.sources[cluster]; ok && at.After(st.LastHeard) {
		st.LastHeard = at
	}
}

// Upsert stores one cluster's endpoint set of a service. An endpoint set
// that does not say the service is exported withdraws it. It returns the
// service's key and whether anything changed.
func (s *Store) Upsert(cluster string, origin Origin, u Update) (Key, bool, error) {
	if u.Endpoints == nil {
		return Key{}, false, ErrNoEndpoints
	}
	key, err := ParseServiceName(u.Endpoints.GetService())
	if err != nil {
		return Key{}, false, err
	}
	if !u.Endpoints.GetExport().GetExported() {
		return key, s.Withdraw(cluster, key, u.ObserveTime, u.TraceContext), nil
	}
	s.mu.Lock()
	ch, changed := s.upsertLocked(cluster, origin, key, u)
	s.mu.Unlock()
	if changed {
		s.notify(ch)
	}
	return key, changed, nil
}

func (s *Store) upsertLocked(cluster string, origin Origin, key Key, u Update) (Change, bool) {
	now := s.now()
	observed := u.ObserveTime
	if observed.IsZero() {
		observed = now
	}
	svc := s.services[key]
	if svc == nil {
		svc = &service{exports: map[string]*Export{}}
		s.services[key] = svc
	}
	prev := svc.exports[cluster]
	if prev != nil && prev.Origin == origin && proto.Equal(prev.Endpoints, u.Endpoints) {
		prev.Revision, prev.ReceiveTime = u.Revision, now
		return Change{}, false
	}
	e := &Export{Cluster: cluster, Origin: origin, Endpoints: u.Endpoints, Revision: u.Revision,
		ObserveTime: observed, ReceiveTime: now, Generation: 1, Ranges: s.ranges[cluster]}
	if prev != nil {
		e.Generation = prev.Generation + 1
	}
	svc.exports[cluster] = e
	keys := s.byCluster[cluster]
	if keys == nil {
		keys = map[Key]struct{}{}
		s.byCluster[cluster] = keys
	}
	keys[key] = struct{}{}
	return Change{Key: key, Cluster: cluster, Observed: observed, TraceContext: u.TraceContext}, true
}

// Withdraw removes cluster's contribution to a service, observed at
// observed (zero: now). It reports whether there was one.
func (s *Store) Withdraw(cluster string, key Key, observed time.Time, traceContext map[string]string) bool {
	s.mu.Lock()
	ch, removed := s.withdrawLocked(cluster, key, observed, traceContext)
	s.mu.Unlock()
	if removed {
		s.notify(ch)
	}
	return removed
}

func (s *Store) withdrawLocked(cluster string, key Key, observed time.Time, traceContext map[string]string) (Change, bool) {
	svc := s.services[key]
	if svc == nil || svc.exports[cluster] == nil {
		return Change{}, false
	}
	if observed.IsZero() {
		observed = s.now()
	}
	delete(svc.exports, cluster)
	delete(s.byCluster[cluster], key)
	if len(svc.exports) == 0 {
		delete(s.services, key)
	}
	return Change{Key: key, Cluster: cluster, Observed: observed, TraceContext: traceContext}, true
}

// Replace makes updates the complete set of services cluster exports
// through origin: services it exported before that are missing from
// updates are withdrawn. It returns how many services changed. Updates
// that do not parse are skipped and returned as errors.
func (s *Store) Replace(cluster string, origin Origin, updates []Update) (int, error) {
	var errs []error
	var changed []Change
	s.mu.Lock()
	now := s.now()
	seen := make(map[Key]struct{}, len(updates))
	for _, u := range updates {
		if u.Endpoints == nil {
			errs = append(errs, ErrNoEndpoints)
			continue
		}
		key, err := ParseServiceName(u.Endpoints.GetService())
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !u.Endpoints.GetExport().GetExported() {
			continue
		}
		seen[key] = struct{}{}
		if ch, ok := s.upsertLocked(cluster, origin, key, u); ok {
			changed = append(changed, ch)
		}
	}
	for key := range s.byCluster[cluster] {
		if _, ok := seen[key]; ok {
			continue
		}
		if e := s.services[key].exports[cluster]; e == nil || e.Origin != origin {
			continue
		}
		if ch, ok := s.withdrawLocked(cluster, key, now, nil); ok {
			changed = append(changed, ch)
		}
	}
	if st, ok := s.sources[cluster]; ok && origin == OriginWatch {
		st.Synced = true
		st.LastHeard = now
	}
	s.mu.Unlock()
	for _, ch := range changed {
		s.notify(ch)
	}
	return len(changed), errors.Join(errs...)
}

// Forget drops every export of origin without notifying, and returns how many it dropped. It is for
// pushes when the leadership term that accepted them ends: the next
// leader does not have them, so this replica must not act on them either
// if it leads again (its pushers push again to whichever replica leads).
func (s *Store) Forget(origin Origin) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for cluster, keys := range s.byCluster {
		for key := range keys {
			svc := s.services[key]
			if e := svc.exports[cluster]; e == nil || e.Origin != origin {
				continue
			}
			delete(svc.exports, cluster)
			delete(keys, key)
			if len(svc.exports) == 0 {
				delete(s.services, key)
			}
			n++
		}
	}
	return n
}

// Get returns the exports of a service; false when no cluster exports it.
func (s *Store) Get(key Key) (Service, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	svc := s.services[key]
	if svc == nil || len(svc.exports) == 0 {
		return Service{Key: key}, false
	}
	out := Service{Key: key, Exports: make([]Export, 0, len(svc.exports))}
	for _, e := range svc.exports {
		out.Exports = append(out.Exports, *e)
	}
	slices.SortFunc(out.Exports, func(a, b Export) int { return strings.Compare(a.Cluster, b.Cluster) })
	return out, true
}

// Clusters returns the clusters that export any service through origin.
func (s *Store) Clusters(origin Origin) []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []string
	for c, keys := range s.byCluster {
		for k := range keys {
			if e := s.services[k].exports[c]; e != nil && e.Origin == origin {
				out = append(out, c)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

// Keys returns the services that some cluster exports, sorted.
func (s *Store) Keys() []Key {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]Key, 0, len(s.services))
	for k, svc := range s.services {
		if len(svc.exports) > 0 {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, Key.Compare)
	return out
}

// Len returns the number of services some cluster exports.
func (s *Store) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	n := 0
	for _, svc := range s.services {
		if len(svc.exports) > 0 {
			n++
		}
	}
	return n
}

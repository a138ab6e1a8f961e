package kube

import (
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/plexusnet/plexus/services/importer/exports"
)

// Kind is a kind of object the importer writes.
type Kind string

// The kinds the importer writes.
const (
	KindServiceImport Kind = "ServiceImport"
	KindService       Kind = "Service"
	KindEndpointSlice Kind = "EndpointSlice"
	// KindServiceExport is written only through its status (the Conflict
	// condition of this cluster's export).
	KindServiceExport Kind = "ServiceExport"
	// KindServiceCIDR is created only (the VIP pools' ranges).
	KindServiceCIDR Kind = "ServiceCIDR"
)

// DefaultTrackerMaxAge is how long the Tracker waits for the cache to show
// one of its writes before it gives up on it.
const DefaultTrackerMaxAge = 2 * time.Minute

// ObjectKey names an object.
type ObjectKey struct {
	Kind      Kind
	Namespace string
	Name      string
}

type tracked struct {
	owner   exports.Key
	uid     types.UID
	rv      uint64 // 0 when the resourceVersion is not a number
	deleted bool
	at      time.Time
}

// Tracker remembers the importer's own writes until the informer caches
// show them, in the manner of the Kubernetes EndpointSlice tracker. A
// reconcile that read a cache older than its service's last write would
// act on a world that no longer exists (most dangerously: create slices
// that were already created, since slices are named by the API server),
// so Stale tells it to wait.
//
// resourceVersions are compared as numbers, which is what the etcd3 storage
// of every Kubernetes API server uses; a version that is not a number only
// counts through the object's presence. An entry the cache has not caught up
// with after the maximum age is dropped: the cache is then trusted again
// rather than blocking the service forever (for example when an object was
// created and deleted by someone else between two watch events).
type Tracker struct {
	maxAge time.Duration
	now    func() time.Time

	mu      sync.Mutex
	entries map[ObjectKey]*tracked
	byOwner map[exports.Key]map[ObjectKey]struct{}
	expired int
}

// NewTracker returns an empty Tracker whose entries expire after maxAge
// (DefaultTrackerMaxAge when 0).
func NewTracker(maxAge time.Duration) *Tracker {
	if maxAge <= 0 {
		maxAge = DefaultTrackerMaxAge
	}
	return &Tracker{maxAge: maxAge, now: time.Now, entries: map[ObjectKey]*tracked{}, byOwner: map[exports.Key]map[ObjectKey]struct{}{}}
}

func keyOf(kind Kind, obj metav1.Object) ObjectKey {
	return ObjectKey{Kind: kind, Namespace: obj.GetNamespace(), Name: obj.GetName()}
}

func parseRV(rv string) uint64 {
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return 0
	}
	return n
}

func (t *Tracker) put(owner exports.Key, k ObjectKey, e *tracked) {
	if old := t.entries[k]; old != nil && old.owner != owner {
		t.unindex(old.owner, k)
	}
	t.entries[k] = e
	set := t.byOwner[owner]
	if set == nil {
		set = map[ObjectKey]struct{}{}
		t.byOwner[owner] = set
	}
	set[k] = struct{}{}
}

func (t *Tracker) drop(k ObjectKey) {
	if e := t.entries[k]; e != nil {
		delete(t.entries, k)
		t.unindex(e.owner, k)
	}
}

func (t *Tracker) unindex(owner exports.Key, k ObjectKey) {
	if set := t.byOwner[owner]; set != nil {
		delete(set, k)
		if len(set) == 0 {
			delete(t.byOwner, owner)
		}
	}
}

// Wrote records a create or update of obj (as the API server returned it)
// on behalf of owner's service.
func (t *Tracker) Wrote(owner exports.Key, kind Kind, obj metav1.Object) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.put(owner, keyOf(kind, obj), &tracked{owner: owner, uid: obj.GetUID(), rv: parseRV(obj.GetResourceVersion()), at: t.now()})
}

// Deleted records a delete of obj (the object as it was before).
func (t *Tracker) Deleted(owner exports.Key, kind Kind, obj metav1.Object) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.put(owner, keyOf(kind, obj), &tracked{owner: owner, uid: obj.GetUID(), deleted: true, at: t.now()})
}

// Observed is called with every object the cache adds or updates: an entry
// the cache caught up with is dropped.
func (t *Tracker) Observed(kind Kind, obj metav1.Object) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := keyOf(kind, obj)
	e := t.entries[k]
	if e == nil || e.deleted {
		return
	}
	if obj.GetUID() != e.uid {
		// Another incarnation: newer than what was written.
		t.drop(k)
		return
	}
	if rv := parseRV(obj.GetResourceVersion()); e.rv == 0 || rv >= e.rv {
		t.drop(k)
	}
}

// Gone is called with every object the cache deletes.
func (t *Tracker) Gone(kind Kind, obj metav1.Object) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := keyOf(kind, obj)
	if e := t.entries[k]; e != nil && e.uid == obj.GetUID() {
		t.drop(k)
	}
}

// Lookup returns the cached object of a key, or nil.
type Lookup func(ObjectKey) metav1.Object

// Stale reports whether the cache (read through lookup) is older than one
// of owner's writes, and which object shows it.
func (t *Tracker) Stale(owner exports.Key, lookup Lookup) (bool, ObjectKey) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	for k := range t.byOwner[owner] {
		e := t.entries[k]
		if now.Sub(e.at) > t.maxAge {
			t.drop(k)
			t.expired++
			continue
		}
		cached := lookup(k)
		if e.deleted {
			if cached != nil && cached.GetUID() == e.uid {
				return true, k
			}
			// Deleted and gone (or replaced): nothing to wait for.
			t.drop(k)
			continue
		}
		switch {
		case cached == nil:
			return true, k
		case cached.GetUID() != e.uid:
			t.drop(k)
		case e.rv != 0 && parseRV(cached.GetResourceVersion()) < e.rv:
			return true, k
		default:
			t.drop(k)
		}
	}
	return false, ObjectKey{}
}

// Len returns the number of writes not yet seen in the caches.
func (t *Tracker) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.entries)
}

// Expired returns how many entries were given up on.
func (t *Tracker) Expired() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.expired
}

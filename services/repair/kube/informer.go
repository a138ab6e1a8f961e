package kube

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// ipIndex is the name of the index from an address to the objects that
// claim it.
const ipIndex = "ip"

// informer is one shared informer and whether its cache can be trusted.
type informer struct {
	name string
	cache.SharedIndexInformer
	health *health
}

// health follows the informer's list and watch calls: an informer whose
// last call failed may hold a stale cache even though it synced once.
type health struct {
	mu    sync.Mutex
	err   error
	since time.Time
}

func (h *health) observe(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case err == nil:
		h.err = nil
	case h.err == nil:
		h.err, h.since = err, time.Now()
	default:
		h.err = err
	}
}

func (h *health) state() (error, time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err, h.since
}

// newInformer builds an informer whose list and watch calls report to its
// health, and whose watch errors (a broken stream, an expired resource
// version) do too.
func newInformer(name string, lw *cache.ListWatch, example runtime.Object, indexers cache.Indexers, transform cache.TransformFunc) (*informer, error) {
	h := &health{}
	tracked := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			obj, err := lw.ListWithContext(ctx, opts)
			h.observe(err)
			return obj, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			w, err := lw.WatchWithContext(ctx, opts)
			h.observe(err)
			return w, err
		},
	}
	inf := cache.NewSharedIndexInformerWithOptions(tracked, example, cache.SharedIndexInformerOptions{
		Indexers:          indexers,
		ObjectDescription: name,
	})
	if transform != nil {
		if err := inf.SetTransform(transform); err != nil {
			return nil, fmt.Errorf("informer %s: %w", name, err)
		}
	}
	if err := inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		h.observe(err)
	}); err != nil {
		return nil, fmt.Errorf("informer %s: %w", name, err)
	}
	return &informer{name: name, SharedIndexInformer: inf, health: h}, nil
}

// problem says why the informer's cache cannot be trusted, or "" when it
// can.
func (i *informer) problem() string {
	err, since := i.health.state()
	switch {
	case !i.HasSynced() && err != nil:
		return fmt.Sprintf("informer %s: not synced: %v", i.name, err)
	case !i.HasSynced():
		return fmt.Sprintf("informer %s: not synced yet", i.name)
	case err != nil:
		return fmt.Sprintf("informer %s: list/watch failing since %s: %v", i.name, since.UTC().Format(time.RFC3339), err)
	}
	return ""
}

// byIP returns the objects of the informer that claim addr.
func (i *informer) byIP(addr netip.Addr) []any {
	objs, err := i.GetIndexer().ByIndex(ipIndex, addr.String())
	if err != nil {
		return nil
	}
	return objs
}

// get returns the object namespace/name of the informer, if cached.
func (i *informer) get(namespace, name string) (any, bool) {
	obj, ok, err := i.GetIndexer().GetByKey(namespace + "/" + name)
	if err != nil || !ok {
		return nil, false
	}
	return obj, true
}

// ipKeys turns addresses as written in objects into index keys: the
// canonical form, so that a lookup by netip.Addr finds them; unparsable
// and zoned addresses claim nothing.
func ipKeys(ips ...string) []string {
	out := make([]string, 0, len(ips))
	for _, s := range ips {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			continue
		}
		out = append(out, a.String())
	}
	return out
}

package kube

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
	mcsinformers "sigs.k8s.io/mcs-api/pkg/client/informers/externalversions"

	"github.com/plexusnet/plexus/internal/mcsnames"
	"github.com/plexusnet/plexus/services/importer/exports"
)

// LabelAppManagedBy marks the ServiceImports and derived Services the
// importer manages (value mcsnames.ManagedBy); objects without it are never
// modified or deleted.
const LabelAppManagedBy = mcsnames.LabelAppManagedBy

// indexService indexes slices by their multicluster service,
// "namespace/name".
const indexService = "mcs-service"

// SliceSelector selects the importer's slices.
func SliceSelector() string { return mcsnames.LabelManagedBy + "=" + mcsnames.ManagedBy }

// ServiceSelector selects derived Services.
func ServiceSelector() string { return mcsnames.LabelDerivedFrom }

// Informers are the importer's caches of the member cluster: its own
// EndpointSlices (by the managed-by label, so other controllers' slices are
// never even seen), derived Services (by the derived-from label),
// ServiceImports and Namespaces.
type Informers struct {
	factories  []interface{ Start(<-chan struct{}) }
	slices     cache.SharedIndexInformer
	services   cache.SharedIndexInformer
	imports    cache.SharedIndexInformer
	namespaces cache.SharedIndexInformer
	// exports are this cluster's ServiceExports, whose Conflict condition
	// the importer writes.
	exports cache.SharedIndexInformer
	// nodes hold the nodes' zone labels only (local first's hints).
	nodes   cache.SharedIndexInformer
	tracker *Tracker
}

// NewInformers builds the informers; tracker (may be nil) is told about
// every object the caches see.
func NewInformers(kube kubernetes.Interface, mcs mcsclient.Interface, tracker *Tracker) (*Informers, error) {
	sliceFactory := informers.NewSharedInformerFactoryWithOptions(kube, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = SliceSelector() }))
	serviceFactory := informers.NewSharedInformerFactoryWithOptions(kube, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = ServiceSelector() }))
	plainFactory := informers.NewSharedInformerFactory(kube, 0)
	mcsFactory := mcsinformers.NewSharedInformerFactory(mcs, 0)
	i := &Informers{
		factories:  []interface{ Start(<-chan struct{}) }{sliceFactory, serviceFactory, plainFactory, mcsFactory},
		slices:     sliceFactory.Discovery().V1().EndpointSlices().Informer(),
		services:   serviceFactory.Core().V1().Services().Informer(),
		imports:    mcsFactory.Multicluster().V1beta1().ServiceImports().Informer(),
		namespaces: plainFactory.Core().V1().Namespaces().Informer(),
		exports:    mcsFactory.Multicluster().V1beta1().ServiceExports().Informer(),
		nodes:      plainFactory.Core().V1().Nodes().Informer(),
		tracker:    tracker,
	}
	// A node is its name and zone here: the rest of its status (images,
	// conditions renewed every few seconds) is never read.
	if err := i.nodes.SetTransform(func(obj any) (any, error) {
		n, ok := obj.(*corev1.Node)
		if !ok {
			return obj, nil
		}
		slim := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, ResourceVersion: n.ResourceVersion}}
		if z, ok := n.Labels[corev1.LabelTopologyZone]; ok {
			slim.Labels = map[string]string{corev1.LabelTopologyZone: z}
		}
		return slim, nil
	}); err != nil {
		return nil, fmt.Errorf("node transform: %w", err)
	}
	if err := i.slices.AddIndexers(cache.Indexers{indexService: func(obj any) ([]string, error) {
		s, ok := obj.(*discovery.EndpointSlice)
		if !ok {
			return nil, nil
		}
		name := s.Labels[mcsnames.LabelMCSServiceName]
		if name == "" {
			return nil, nil
		}
		return []string{s.Namespace + "/" + name}, nil
	}}); err != nil {
		return nil, fmt.Errorf("slice index: %w", err)
	}
	for _, inf := range []cache.SharedIndexInformer{i.slices, i.services, i.imports, i.namespaces, i.exports} {
		// Managed fields are never read; with thousands of slices they are
		// a good part of the cache.
		if err := inf.SetTransform(func(obj any) (any, error) {
			if m, ok := obj.(metav1.Object); ok {
				m.SetManagedFields(nil)
			}
			return obj, nil
		}); err != nil {
			return nil, fmt.Errorf("informer transform: %w", err)
		}
	}
	return i, nil
}

// Handlers are called by the informers.
type Handlers struct {
	// Service is called with the key of every service one of whose objects
	// changed.
	Service func(exports.Key)
	// Namespace is called with every namespace that appears.
	Namespace func(string)
}

// AddHandlers registers h; call it before Start.
func (i *Informers) AddHandlers(h Handlers) error {
	type keyFunc func(metav1.Object) (exports.Key, bool)
	add := func(inf cache.SharedIndexInformer, kind Kind, key keyFunc) error {
		handle := func(obj any, gone bool) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj, gone = d.Obj, true
			}
			m, ok := obj.(metav1.Object)
			if !ok {
				return
			}
			if i.tracker != nil {
				if gone {
					i.tracker.Gone(kind, m)
				} else {
					i.tracker.Observed(kind, m)
				}
			}
			if k, ok := key(m); ok && h.Service != nil {
				h.Service(k)
			}
		}
		_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { handle(obj, false) },
			UpdateFunc: func(_, obj any) { handle(obj, false) },
			DeleteFunc: func(obj any) { handle(obj, true) },
		})
		return err
	}
	byLabel := func(label string) keyFunc {
		return func(m metav1.Object) (exports.Key, bool) {
			name := m.GetLabels()[label]
			return exports.Key{Namespace: m.GetNamespace(), Name: name}, name != ""
		}
	}
	byName := func(m metav1.Object) (exports.Key, bool) {
		return exports.Key{Namespace: m.GetNamespace(), Name: m.GetName()}, true
	}
	if err := add(i.slices, KindEndpointSlice, byLabel(mcsnames.LabelMCSServiceName)); err != nil {
		return fmt.Errorf("slice handler: %w", err)
	}
	if err := add(i.services, KindService, byLabel(mcsnames.LabelDerivedFrom)); err != nil {
		return fmt.Errorf("service handler: %w", err)
	}
	if err := add(i.imports, KindServiceImport, byName); err != nil {
		return fmt.Errorf("import handler: %w", err)
	}
	if err := add(i.exports, KindServiceExport, byName); err != nil {
		return fmt.Errorf("export handler: %w", err)
	}
	_, err := i.namespaces.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if ns, ok := obj.(*corev1.Namespace); ok && h.Namespace != nil {
				h.Namespace(ns.Name)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("namespace handler: %w", err)
	}
	return nil
}

// Start starts the informers; they stop when ctx ends.
func (i *Informers) Start(ctx context.Context) {
	for _, f := range i.factories {
		f.Start(ctx.Done())
	}
}

// WaitForSync waits until every cache is synced or ctx ends.
func (i *Informers) WaitForSync(ctx context.Context) bool {
	return cache.WaitForCacheSync(ctx.Done(), i.HasSynced)
}

// HasSynced reports whether every cache is synced.
func (i *Informers) HasSynced() bool {
	return i.slices.HasSynced() && i.services.HasSynced() && i.imports.HasSynced() && i.namespaces.HasSynced() && i.exports.HasSynced() &&
		i.nodes.HasSynced()
}

// NodeZones returns the zones of the cluster's nodes (their
// topology.kubernetes.io/zone labels), sorted; nodes without one add none.
func (i *Informers) NodeZones() []string {
	var zones []string
	for _, o := range i.nodes.GetStore().List() {
		if n, ok := o.(*corev1.Node); ok {
			if z := n.Labels[corev1.LabelTopologyZone]; z != "" && !slices.Contains(zones, z) {
				zones = append(zones, z)
			}
		}
	}
	slices.Sort(zones)
	return zones
}

// SlicesOf returns the importer's cached slices of a service.
func (i *Informers) SlicesOf(key exports.Key) []*discovery.EndpointSlice {
	objs, err := i.slices.GetIndexer().ByIndex(indexService, key.String())
	if err != nil {
		return nil
	}
	out := make([]*discovery.EndpointSlice, 0, len(objs))
	for _, o := range objs {
		if s, ok := o.(*discovery.EndpointSlice); ok {
			out = append(out, s)
		}
	}
	return out
}

// SliceServices returns the services that have cached slices, sorted.
func (i *Informers) SliceServices() []exports.Key {
	var out []exports.Key
	for _, v := range i.slices.GetIndexer().ListIndexFuncValues(indexService) {
		ns, name, ok := strings.Cut(v, "/")
		if ok {
			out = append(out, exports.Key{Namespace: ns, Name: name})
		}
	}
	slices.SortFunc(out, exports.Key.Compare)
	return out
}

func get[T any](inf cache.SharedIndexInformer, namespace, name string) *T {
	key := name
	if namespace != "" {
		key = namespace + "/" + name
	}
	obj, ok, err := inf.GetIndexer().GetByKey(key)
	if err != nil || !ok {
		return nil
	}
	t, _ := obj.(*T)
	return t
}

// Import returns a cached ServiceImport, or nil.
func (i *Informers) Import(namespace, name string) *mcsv1beta1.ServiceImport {
	return get[mcsv1beta1.ServiceImport](i.imports, namespace, name)
}

// Export returns the cached ServiceExport of that name, if any.
func (i *Informers) Export(namespace, name string) *mcsv1beta1.ServiceExport {
	return get[mcsv1beta1.ServiceExport](i.exports, namespace, name)
}

// Imports returns every cached ServiceImport the importer manages.
func (i *Informers) Imports() []*mcsv1beta1.ServiceImport {
	var out []*mcsv1beta1.ServiceImport
	for _, o := range i.imports.GetIndexer().List() {
		if si, ok := o.(*mcsv1beta1.ServiceImport); ok && Managed(si) {
			out = append(out, si)
		}
	}
	return out
}

// Service returns a cached derived Service, or nil.
func (i *Informers) Service(namespace, name string) *corev1.Service {
	return get[corev1.Service](i.services, namespace, name)
}

// NamespaceExists reports whether the cache has the namespace.
func (i *Informers) NamespaceExists(name string) bool {
	return get[corev1.Namespace](i.namespaces, "", name) != nil
}

// Lookup returns the cached object of k, or nil (for Tracker.Stale).
func (i *Informers) Lookup(k ObjectKey) metav1.Object {
	var m metav1.Object
	switch k.Kind {
	case KindEndpointSlice:
		if s := get[discovery.EndpointSlice](i.slices, k.Namespace, k.Name); s != nil {
			m = s
		}
	case KindService:
		if s := get[corev1.Service](i.services, k.Namespace, k.Name); s != nil {
			m = s
		}
	case KindServiceImport:
		if s := get[mcsv1beta1.ServiceImport](i.imports, k.Namespace, k.Name); s != nil {
			m = s
		}
	case KindServiceExport:
		if s := get[mcsv1beta1.ServiceExport](i.exports, k.Namespace, k.Name); s != nil {
			m = s
		}
	}
	return m
}

// Managed reports whether the importer manages obj (a ServiceImport or a
// derived Service).
func Managed(obj metav1.Object) bool {
	return mcsnames.Managed(obj.GetLabels())
}

package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	workloadv1alpha1 "github.com/plexusnet/plexus/api/workload/v1alpha1"
	"github.com/plexusnet/plexus/internal/mcsnames"
	"github.com/plexusnet/plexus/services/repair/decide"
)

// Owner kinds the view resolves, as allocations name them.
const (
	KindPod              = "Pod"
	KindExternalWorkload = "ExternalWorkload"
	KindServiceImport    = "ServiceImport"
	// KindService only ever appears as the other claimant of a
	// DUPLICATE: Services hold clusterIPs, not allocations.
	KindService = "Service"
)

// Sources of claims, as findings quote them.
const (
	claimPodIPs      = "Pod.status.podIPs"
	claimClusterIPs  = "Service.spec.clusterIPs"
	claimDerivedIPs  = "derived Service.spec.clusterIPs"
	claimWorkloadIPs = "ExternalWorkload.spec.workloadIPs"
	claimImportIPs   = "ServiceImport.spec.ips"
)

// Config is what New needs.
type Config struct {
	// Cluster is --cluster-name: the cluster of the Pods and
	// ExternalWorkloads the informers see.
	Cluster string
	// Kube, MCS and Workloads are clients of the member cluster.
	Kube      kubernetes.Interface
	MCS       mcsclient.Interface
	Workloads rest.Interface
	// Logger may be nil.
	Logger *slog.Logger
}

// View is the owners' side of a repair pass. It is safe for concurrent use.
type View struct {
	cluster string
	kube    kubernetes.Interface
	logger  *slog.Logger
	// sources are the memberships whose exports keep clusterset services
	// alive, by cluster; they come and go with the fleet.
	srcMu     sync.RWMutex
	sources   map[string]Exporter
	pods      *informer
	services  *informer
	imports   *informer
	workloads *informer
	slices    *informer
	all       []*informer
}

// New builds the informers of the member cluster; Run starts them.
func New(cfg Config) (*View, error) {
	if cfg.Cluster == "" {
		return nil, errors.New("repair view: the cluster name is required")
	}
	if cfg.Kube == nil || cfg.MCS == nil || cfg.Workloads == nil {
		return nil, errors.New("repair view: Kube, MCS and Workloads clients are required")
	}
	v := &View{cluster: cfg.Cluster, kube: cfg.Kube, logger: cfg.Logger, sources: map[string]Exporter{}}
	if v.logger == nil {
		v.logger = slog.New(slog.DiscardHandler)
	}
	core := cfg.Kube.CoreV1()
	var err error
	v.pods, err = newInformer("pods", &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return core.Pods(metav1.NamespaceAll).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return core.Pods(metav1.NamespaceAll).Watch(ctx, o)
		},
	}, &corev1.Pod{}, cache.Indexers{ipIndex: podIPs}, slimPod)
	if err != nil {
		return nil, err
	}
	v.services, err = newInformer("services", &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return core.Services(metav1.NamespaceAll).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return core.Services(metav1.NamespaceAll).Watch(ctx, o)
		},
	}, &corev1.Service{}, cache.Indexers{ipIndex: serviceIPs}, slimService)
	if err != nil {
		return nil, err
	}
	mcs := cfg.MCS.MulticlusterV1beta1()
	v.imports, err = newInformer("serviceimports", &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return mcs.ServiceImports(metav1.NamespaceAll).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return mcs.ServiceImports(metav1.NamespaceAll).Watch(ctx, o)
		},
	}, &mcsv1beta1.ServiceImport{}, cache.Indexers{ipIndex: importIPs}, nil)
	if err != nil {
		return nil, err
	}
	v.workloads, err = newInformer("externalworkloads",
		cache.NewFilteredListWatchFromClient(cfg.Workloads, workloadv1alpha1.ResourceExternalWorkloads, metav1.NamespaceAll, func(*metav1.ListOptions) {}),
		&workloadv1alpha1.ExternalWorkload{}, cache.Indexers{ipIndex: workloadIPs}, nil)
	if err != nil {
		return nil, err
	}
	discovery := cfg.Kube.DiscoveryV1()
	// Only the importer's slices: the label selector keeps every other
	// controller's slices out of the cache, and out of reach.
	selector := mcsnames.LabelManagedBy + "=" + mcsnames.ManagedBy
	v.slices, err = newInformer("endpointslices", &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			return discovery.EndpointSlices(metav1.NamespaceAll).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			return discovery.EndpointSlices(metav1.NamespaceAll).Watch(ctx, o)
		},
	}, &discoveryv1.EndpointSlice{}, cache.Indexers{}, slimSlice)
	if err != nil {
		return nil, err
	}
	v.all = []*informer{v.pods, v.services, v.imports, v.workloads, v.slices}
	return v, nil
}

// Run runs the informers until ctx ends. The sources are run by whoever
// adds them (the fleet group).
func (v *View) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, inf := range v.all {
		wg.Go(func() { inf.RunWithContext(ctx) })
	}
	wg.Wait()
}

// Exporter is what the view needs of one source cluster's membership
// stream (sources.Source): the services it exports, and why its view is
// not complete and current ("" when it is).
type Exporter interface {
	Name() string
	Exports(namespace, name string) bool
	Problem() string
}

// AddSource makes s the source of its cluster, replacing the one before
// (the member's membership moved).
func (v *View) AddSource(s Exporter) {
	v.srcMu.Lock()
	defer v.srcMu.Unlock()
	v.sources[s.Name()] = s
}

// RemoveSource forgets the source of a cluster that left the fleet: its
// exports no longer keep services alive (the member cluster's
// ServiceImports still do, until its importer withdraws them).
func (v *View) RemoveSource(cluster string) {
	v.srcMu.Lock()
	defer v.srcMu.Unlock()
	delete(v.sources, cluster)
}

// sourceList returns the sources, sorted by cluster.
func (v *View) sourceList() []Exporter {
	v.srcMu.RLock()
	defer v.srcMu.RUnlock()
	out := make([]Exporter, 0, len(v.sources))
	for _, s := range v.sources {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b Exporter) int { return strings.Compare(a.Name(), b.Name()) })
	return out
}

// WaitForSync waits until every informer has synced or ctx ends, and
// reports whether they all did. Sources are not waited for: one that is
// down must not hold up the others.
func (v *View) WaitForSync(ctx context.Context) bool {
	synced := make([]cache.InformerSynced, len(v.all))
	for i, inf := range v.all {
		synced[i] = inf.HasSynced
	}
	return cache.WaitForCacheSync(ctx.Done(), synced...)
}

// InformersSynced reports whether every informer has synced and its last
// list or watch call succeeded; the error says which did not.
func (v *View) InformersSynced() error {
	var problems []string
	for _, inf := range v.all {
		if p := inf.problem(); p != "" {
			problems = append(problems, p)
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// SourcesSynced reports whether every source holds a complete, current
// snapshot; the error says which does not.
func (v *View) SourcesSynced() error {
	var problems []string
	for _, s := range v.sourceList() {
		if p := s.Problem(); p != "" {
			problems = append(problems, p)
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// Synced reports whether a pass over the view may act, and if not, why.
func (v *View) Synced() (bool, string) {
	var reasons []string
	if err := v.InformersSynced(); err != nil {
		reasons = append(reasons, err.Error())
	}
	if err := v.SourcesSynced(); err != nil {
		reasons = append(reasons, err.Error())
	}
	return len(reasons) == 0, strings.Join(reasons, "; ")
}

// Scopes returns the owners the view resolves, for decide.Config.
func (v *View) Scopes() []decide.Scope {
	return []decide.Scope{
		{Kind: KindPod, Cluster: v.cluster},
		{Kind: KindExternalWorkload, Cluster: v.cluster},
		{Kind: KindServiceImport, Cluster: v.cluster},
		{Kind: mcsnames.OwnerKindClusterSetService, Cluster: ""},
	}
}

// UIDs implements decide.OwnerView.
func (v *View) UIDs(id decide.Identity) []string {
	if id.Kind == mcsnames.OwnerKindClusterSetService {
		if id.Cluster == "" && v.clusterSetServiceExists(id.Namespace, id.Name) {
			return []string{""}
		}
		return nil
	}
	if id.Cluster != v.cluster {
		return nil
	}
	var inf *informer
	switch id.Kind {
	case KindPod:
		inf = v.pods
	case KindExternalWorkload:
		inf = v.workloads
	case KindServiceImport:
		inf = v.imports
	default:
		return nil
	}
	obj, ok := inf.get(id.Namespace, id.Name)
	if !ok {
		return nil
	}
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil
	}
	return []string{string(m.GetUID())}
}

func (v *View) clusterSetServiceExists(namespace, name string) bool {
	if _, ok := v.imports.get(namespace, name); ok {
		return true
	}
	for _, s := range v.sourceList() {
		if s.Exports(namespace, name) {
			return true
		}
	}
	return false
}

// Claims implements decide.OwnerView.
func (v *View) Claims(addr netip.Addr) []decide.Claim {
	var out []decide.Claim
	for _, obj := range v.pods.byIP(addr) {
		if p, ok := obj.(*corev1.Pod); ok {
			out = append(out, decide.Claim{Address: addr, Owner: v.owner(KindPod, &p.ObjectMeta), Source: claimPodIPs})
		}
	}
	for _, obj := range v.services.byIP(addr) {
		s, ok := obj.(*corev1.Service)
		if !ok {
			continue
		}
		if from := s.Labels[mcsnames.LabelDerivedFrom]; from != "" {
			out = append(out, decide.Claim{Address: addr, Owner: clusterSetService(s.Namespace, from), Source: claimDerivedIPs})
			continue
		}
		out = append(out, decide.Claim{Address: addr, Owner: v.owner(KindService, &s.ObjectMeta), Source: claimClusterIPs})
	}
	for _, obj := range v.workloads.byIP(addr) {
		if w, ok := obj.(*workloadv1alpha1.ExternalWorkload); ok {
			out = append(out, decide.Claim{Address: addr, Owner: v.owner(KindExternalWorkload, &w.ObjectMeta), Source: claimWorkloadIPs})
		}
	}
	for _, obj := range v.imports.byIP(addr) {
		if si, ok := obj.(*mcsv1beta1.ServiceImport); ok {
			out = append(out, decide.Claim{Address: addr, Owner: clusterSetService(si.Namespace, si.Name), Source: claimImportIPs})
		}
	}
	return out
}

func (v *View) owner(kind string, m *metav1.ObjectMeta) decide.Owner {
	return decide.Owner{Cluster: v.cluster, Kind: kind, Namespace: m.Namespace, Name: m.Name, UID: string(m.UID)}
}

func clusterSetService(namespace, name string) decide.Owner {
	return decide.Owner{Kind: mcsnames.OwnerKindClusterSetService, Namespace: namespace, Name: name}
}

// Slices returns the importer's EndpointSlices with whether their
// ServiceImport and derived Service exist.
func (v *View) Slices() []decide.Slice {
	objs := v.slices.GetStore().List()
	out := make([]decide.Slice, 0, len(objs))
	for _, obj := range objs {
		s, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok {
			continue
		}
		d := decide.Slice{
			Namespace:       s.Namespace,
			Name:            s.Name,
			UID:             string(s.UID),
			ResourceVersion: s.ResourceVersion,
			ManagedBy:       s.Labels[mcsnames.LabelManagedBy],
			ServiceName:     s.Labels[mcsnames.LabelServiceName],
			CreateTime:      s.CreationTimestamp.Time,
		}
		if name := s.Labels[mcsnames.LabelMCSServiceName]; name != "" {
			_, d.ImportExists = v.imports.get(s.Namespace, name)
		}
		if d.ServiceName != "" {
			_, d.ServiceExists = v.services.get(s.Namespace, d.ServiceName)
		}
		out = append(out, d)
	}
	return out
}

// DeleteSlice deletes an orphaned slice, only if it still is the object the
// pass judged: same uid and resourceVersion. A slice that is already gone
// counts as deleted.
func (v *View) DeleteSlice(ctx context.Context, ref decide.SliceRef) error {
	if ref.Namespace == "" || ref.Name == "" || ref.UID == "" || ref.ResourceVersion == "" {
		// Without both preconditions the delete could hit a slice the
		// pass never saw.
		return errors.New("repair view: slice reference without namespace, name, uid or resourceVersion")
	}
	uid, rv := types.UID(ref.UID), ref.ResourceVersion
	err := v.kube.DiscoveryV1().EndpointSlices(ref.Namespace).Delete(ctx, ref.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv},
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete EndpointSlice %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	return nil
}

// Reference returns the Kubernetes object an Event about owner o belongs
// on: the object of that identity as it exists now (possibly another
// incarnation, with another uid), or, when it is gone, a reference to it by
// name with the owner's uid, so that the release of a leaked address is
// recorded where the owner was; nil for an owner of another cluster or a
// kind without objects. A ClusterSetService's object is its ServiceImport.
func (v *View) Reference(o decide.Owner) *corev1.ObjectReference {
	var inf *informer
	var apiVersion, kind string
	namespace, name := o.Namespace, o.Name
	switch {
	case o.Kind == mcsnames.OwnerKindClusterSetService:
		inf, apiVersion, kind = v.imports, mcsv1beta1.GroupVersion.String(), KindServiceImport
	case o.Cluster != v.cluster:
		return nil
	case o.Kind == KindPod:
		inf, apiVersion, kind = v.pods, "v1", KindPod
	case o.Kind == KindService:
		inf, apiVersion, kind = v.services, "v1", KindService
	case o.Kind == KindExternalWorkload:
		inf, apiVersion, kind = v.workloads, workloadv1alpha1.SchemeGroupVersion.String(), KindExternalWorkload
	case o.Kind == KindServiceImport:
		inf, apiVersion, kind = v.imports, mcsv1beta1.GroupVersion.String(), KindServiceImport
	default:
		return nil
	}
	obj, ok := inf.get(namespace, name)
	if !ok {
		// The owner is gone (a leak): the Event still belongs to its name,
		// where `kubectl get events` and `describe` of a new object of
		// that name find it. The uid is the allocation's owner's.
		if namespace == "" {
			return nil
		}
		return &corev1.ObjectReference{APIVersion: apiVersion, Kind: kind, Namespace: namespace, Name: name, UID: types.UID(o.UID)}
	}
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil
	}
	return &corev1.ObjectReference{APIVersion: apiVersion, Kind: kind, Namespace: namespace, Name: name,
		UID: m.GetUID(), ResourceVersion: m.GetResourceVersion()}
}

// Index functions: the addresses an object claims.

func podIPs(obj any) ([]string, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok || p.Spec.HostNetwork || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return nil, nil
	}
	ips := make([]string, 0, len(p.Status.PodIPs)+1)
	for _, ip := range p.Status.PodIPs {
		ips = append(ips, ip.IP)
	}
	if len(ips) == 0 && p.Status.PodIP != "" {
		ips = append(ips, p.Status.PodIP)
	}
	return dedupe(ipKeys(ips...)), nil
}

func serviceIPs(obj any) ([]string, error) {
	s, ok := obj.(*corev1.Service)
	if !ok {
		return nil, nil
	}
	ips := s.Spec.ClusterIPs
	if len(ips) == 0 && s.Spec.ClusterIP != "" {
		ips = []string{s.Spec.ClusterIP}
	}
	// "None" (headless) does not parse and claims nothing.
	return dedupe(ipKeys(ips...)), nil
}

func importIPs(obj any) ([]string, error) {
	si, ok := obj.(*mcsv1beta1.ServiceImport)
	if !ok {
		return nil, nil
	}
	return dedupe(ipKeys(si.Spec.IPs...)), nil
}

func workloadIPs(obj any) ([]string, error) {
	w, ok := obj.(*workloadv1alpha1.ExternalWorkload)
	if !ok {
		return nil, nil
	}
	return dedupe(ipKeys(w.Spec.WorkloadIPs...)), nil
}

func dedupe(keys []string) []string {
	if len(keys) < 2 {
		return keys
	}
	out := keys[:0]
	for i, k := range keys {
		dup := false
		for _, prev := range keys[:i] {
			if prev == k {
				dup = true
				break
			}
		}
		if !dup {
			out = append(out, k)
		}
	}
	return out
}

// Transforms: keep only what repair reads, so 50,000 Pods cost megabytes,
// not the gigabyte their full objects would.

func slimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	return &corev1.Pod{
		ObjectMeta: slimMeta(&p.ObjectMeta, false),
		Spec:       corev1.PodSpec{HostNetwork: p.Spec.HostNetwork},
		Status:     corev1.PodStatus{Phase: p.Status.Phase, PodIP: p.Status.PodIP, PodIPs: p.Status.PodIPs},
	}, nil
}

func slimService(obj any) (any, error) {
	s, ok := obj.(*corev1.Service)
	if !ok {
		return obj, nil
	}
	return &corev1.Service{
		ObjectMeta: slimMeta(&s.ObjectMeta, true),
		Spec:       corev1.ServiceSpec{ClusterIP: s.Spec.ClusterIP, ClusterIPs: s.Spec.ClusterIPs},
	}, nil
}

func slimSlice(obj any) (any, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return obj, nil
	}
	return &discoveryv1.EndpointSlice{ObjectMeta: slimMeta(&s.ObjectMeta, true), AddressType: s.AddressType}, nil
}

func slimMeta(m *metav1.ObjectMeta, labels bool) metav1.ObjectMeta {
	out := metav1.ObjectMeta{
		Name:              m.Name,
		Namespace:         m.Namespace,
		UID:               m.UID,
		ResourceVersion:   m.ResourceVersion,
		CreationTimestamp: m.CreationTimestamp,
		DeletionTimestamp: m.DeletionTimestamp,
	}
	if labels {
		out.Labels = m.Labels
	}
	return out
}

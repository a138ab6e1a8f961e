package kube

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
	mcsinformers "sigs.k8s.io/mcs-api/pkg/client/informers/externalversions"
	mcslisters "sigs.k8s.io/mcs-api/pkg/client/listers/apis/v1beta1"

	workloadv1alpha1 "github.com/plexusnet/plexus/api/workload/v1alpha1"
	workloadclient "github.com/plexusnet/plexus/api/workload/v1alpha1/client"
)

// ErrWorkloadNotFound means a Pod or ExternalWorkload is not in the cache.
var ErrWorkloadNotFound = errors.New("workload not found")

// Indexes of the caches: Pods by node, to find those whose zone changes
// with their node's labels; Pods and ExternalWorkloads by the addresses
// they use, so a registration can be refused an address another holds.
const (
	podNodeIndex = "spec.nodeName"
	addressIndex = "address"
)

// Handlers are what the loop is told of each change: old is nil on an
// add, new nil on a delete.
type Handlers struct {
	Service          func(old, new *corev1.Service)
	Pod              func(old, new *corev1.Pod)
	Node             func(old, new *corev1.Node)
	Export           func(old, new *mcsv1beta1.ServiceExport)
	ExternalWorkload func(old, new *workloadv1alpha1.ExternalWorkload)
}

// Caches are membership's view of one cluster: shared informers over
// Services, Pods, Nodes (for zones), ServiceExports and ExternalWorkloads,
// trimmed to what an endpoint needs, and the one write membership makes,
// a ServiceExport's status.
type Caches struct {
	Services corelisters.ServiceLister
	Pods     corelisters.PodLister
	Nodes    corelisters.NodeLister
	Exports  mcslisters.ServiceExportLister

	kubeFactory informers.SharedInformerFactory
	mcsFactory  mcsinformers.SharedInformerFactory
	podInf      cache.SharedIndexInformer
	workloadInf cache.SharedIndexInformer
	handlers    []cache.ResourceEventHandlerRegistration
	// mcs writes the status of ServiceExports; nil writes nothing.
	mcs mcsclient.Interface
}

// NewCaches builds the informers over the clients, their indexes and the
// handlers' registrations; Run runs them. workloads is a REST client of
// the ExternalWorkload API (see package api/workload/v1alpha1/client);
// resync 0 turns resyncs off.
func NewCaches(kube kubernetes.Interface, mcs mcsclient.Interface, workloads rest.Interface, resync time.Duration, h Handlers) (*Caches, error) {
	c := &Caches{
		kubeFactory: informers.NewSharedInformerFactoryWithOptions(kube, resync, informers.WithTransform(trim)),
		mcsFactory:  mcsinformers.NewSharedInformerFactoryWithOptions(mcs, resync, mcsinformers.WithTransform(trim)),
		mcs:         mcs,
	}
	svcInf := c.kubeFactory.Core().V1().Services()
	podInf := c.kubeFactory.Core().V1().Pods()
	nodeInf := c.kubeFactory.Core().V1().Nodes()
	exportInf := c.mcsFactory.Multicluster().V1beta1().ServiceExports()
	c.Services, c.Pods, c.Nodes, c.Exports = svcInf.Lister(), podInf.Lister(), nodeInf.Lister(), exportInf.Lister()
	c.podInf = podInf.Informer()
	if err := c.podInf.AddIndexers(cache.Indexers{podNodeIndex: podNode, addressIndex: podAddresses}); err != nil {
		return nil, fmt.Errorf("index pods: %w", err)
	}
	c.workloadInf = workloadclient.NewInformer(workloads, metav1.NamespaceAll, resync)
	if err := c.workloadInf.SetTransform(trim); err != nil {
		return nil, fmt.Errorf("external workload informer: %w", err)
	}
	if err := c.workloadInf.AddIndexers(cache.Indexers{addressIndex: workloadAddresses}); err != nil {
		return nil, fmt.Errorf("index external workloads by address: %w", err)
	}
	for _, r := range []struct {
		inf cache.SharedIndexInformer
		fns cache.ResourceEventHandlerFuncs
	}{
		{svcInf.Informer(), handlerFuncs(h.Service)},
		{c.podInf, handlerFuncs(h.Pod)},
		{nodeInf.Informer(), handlerFuncs(h.Node)},
		{exportInf.Informer(), handlerFuncs(h.Export)},
		{c.workloadInf, handlerFuncs(h.ExternalWorkload)},
	} {
		reg, err := r.inf.AddEventHandler(r.fns)
		if err != nil {
			return nil, fmt.Errorf("add event handler: %w", err)
		}
		c.handlers = append(c.handlers, reg)
	}
	return c, nil
}

// Start starts the informers; stop, once ctx has ended, waits for them.
func (c *Caches) Start(ctx context.Context) (stop func()) {
	c.kubeFactory.Start(ctx.Done())
	c.mcsFactory.Start(ctx.Done())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.workloadInf.RunWithContext(ctx)
	}()
	return func() {
		c.kubeFactory.Shutdown()
		c.mcsFactory.Shutdown()
		<-done
	}
}

// Synced are the handlers' registrations: each has synced once its
// informer's initial list has been handed to the handler.
func (c *Caches) Synced() []cache.InformerSynced {
	out := make([]cache.InformerSynced, 0, len(c.handlers))
	for _, h := range c.handlers {
		out = append(out, h.HasSynced)
	}
	return out
}

// ExternalWorkloadInformer returns the shared ExternalWorkload informer, for
// other users of the same cache (the heartbeat sweeper). Start runs it.
func (c *Caches) ExternalWorkloadInformer() cache.SharedIndexInformer { return c.workloadInf }

// Pod returns a cached Pod; ok is false when it is not cached.
func (c *Caches) Pod(namespace, name string) (p *corev1.Pod, ok bool, err error) {
	p, err = c.Pods.Pods(namespace).Get(name)
	switch {
	case apierrors.IsNotFound(err):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("get pod %s/%s from cache: %w", namespace, name, err)
	}
	return p, true, nil
}

// ExternalWorkload returns a cached ExternalWorkload; ok is false when it
// is not cached.
func (c *Caches) ExternalWorkload(namespace, name string) (ew *workloadv1alpha1.ExternalWorkload, ok bool, err error) {
	obj, exists, err := c.workloadInf.GetIndexer().GetByKey(namespace + "/" + name)
	if err != nil {
		return nil, false, fmt.Errorf("get external workload %s/%s from cache: %w", namespace, name, err)
	}
	ew, ok = obj.(*workloadv1alpha1.ExternalWorkload)
	return ew, exists && ok, nil
}

// PodsOnNode returns the cached Pods scheduled to node.
func (c *Caches) PodsOnNode(node string) ([]*corev1.Pod, error) {
	objs, err := c.podInf.GetIndexer().ByIndex(podNodeIndex, node)
	if err != nil {
		return nil, fmt.Errorf("list pods of node %s from cache: %w", node, err)
	}
	out := make([]*corev1.Pod, 0, len(objs))
	for _, obj := range objs {
		if p, ok := obj.(*corev1.Pod); ok {
			out = append(out, p)
		}
	}
	return out, nil
}

// Zone returns the zone label of a node, "" when the node or its label is
// unknown.
func (c *Caches) Zone(node string) string {
	if node == "" {
		return ""
	}
	n, err := c.Nodes.Get(node)
	if err != nil {
		return ""
	}
	return n.Labels[ZoneLabel]
}

// AddressHolders returns who uses addr in the cluster as the caches show
// it, as "Pod namespace/name" or "ExternalWorkload namespace/name".
func (c *Caches) AddressHolders(addr string) []string {
	var out []string
	for _, inf := range []struct {
		kind string
		inf  cache.SharedIndexInformer
	}{{"Pod", c.podInf}, {workloadv1alpha1.KindExternalWorkload, c.workloadInf}} {
		objs, err := inf.inf.GetIndexer().ByIndex(addressIndex, addr)
		if err != nil {
			continue
		}
		for _, o := range objs {
			if key, err := cache.MetaNamespaceKeyFunc(o); err == nil {
				out = append(out, inf.kind+" "+key)
			}
		}
	}
	return out
}

// WriteExportStatus brings the ServiceExport's conditions of conds' types
// to conds through the status subresource, guarded by the cached object's
// resourceVersion (a lost race is retried by the caller); other conditions
// are kept. Nothing is written when nothing changes, so replicas that agree
// write once between them.
func (c *Caches) WriteExportStatus(ctx context.Context, export *mcsv1beta1.ServiceExport, conds []metav1.Condition) error {
	next := export.DeepCopy()
	for _, cd := range conds {
		cd.ObservedGeneration = export.Generation
		meta.SetStatusCondition(&next.Status.Conditions, cd)
	}
	if equality.Semantic.DeepEqual(export.Status, next.Status) || c.mcs == nil {
		return nil
	}
	if _, err := c.mcs.MulticlusterV1beta1().ServiceExports(export.Namespace).UpdateStatus(ctx, next, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update status of ServiceExport %s/%s: %w", export.Namespace, export.Name, err)
	}
	return nil
}

// handlerFuncs adapts a change function (old nil on add, new nil on delete)
// to informer callbacks, unwrapping the tombstones of deletions the watch
// missed.
func handlerFuncs[T any](changed func(old, new *T)) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if o, ok := obj.(*T); ok {
				changed(nil, o)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*T)
			n, ok2 := newObj.(*T)
			if ok1 && ok2 {
				changed(o, n)
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if o, ok := obj.(*T); ok {
				changed(o, nil)
			}
		},
	}
}

func podNode(obj any) ([]string, error) {
	if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
		return []string{p.Spec.NodeName}, nil
	}
	return nil, nil
}

// podAddresses are the addresses a Pod holds: none for a host-network Pod
// (it shares its node's) or a Pod that ended (its address may be reused).
func podAddresses(obj any) ([]string, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok || p.Spec.HostNetwork || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return nil, nil
	}
	var out []string
	for _, ip := range p.Status.PodIPs {
		out = append(out, ip.IP)
	}
	if len(out) == 0 && p.Status.PodIP != "" {
		out = append(out, p.Status.PodIP)
	}
	return out, nil
}

func workloadAddresses(obj any) ([]string, error) {
	if w, ok := obj.(*workloadv1alpha1.ExternalWorkload); ok {
		return w.Spec.WorkloadIPs, nil
	}
	return nil, nil
}

// trim drops from cached objects what membership never reads, above all
// managed fields and, for Pods and Nodes, everything but what an endpoint
// needs: the caches hold every Pod of the cluster.
func trim(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return trimPod(o), nil
	case *corev1.Node:
		return &corev1.Node{TypeMeta: o.TypeMeta, ObjectMeta: metav1.ObjectMeta{
			Name: o.Name, UID: o.UID, ResourceVersion: o.ResourceVersion, Labels: o.Labels,
		}}, nil
	case metav1.ObjectMetaAccessor:
		o.GetObjectMeta().SetManagedFields(nil)
	}
	return obj, nil
}

func trimPod(p *corev1.Pod) *corev1.Pod {
	out := &corev1.Pod{
		TypeMeta: p.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			Labels: p.Labels, CreationTimestamp: p.CreationTimestamp, DeletionTimestamp: p.DeletionTimestamp,
		},
		Spec: corev1.PodSpec{NodeName: p.Spec.NodeName, Hostname: p.Spec.Hostname, Subdomain: p.Spec.Subdomain, HostNetwork: p.Spec.HostNetwork},
		Status: corev1.PodStatus{
			Phase: p.Status.Phase, PodIP: p.Status.PodIP, PodIPs: p.Status.PodIPs,
		},
	}
	for _, c := range p.Spec.Containers {
		if len(c.Ports) > 0 {
			out.Spec.Containers = append(out.Spec.Containers, corev1.Container{Name: c.Name, Ports: c.Ports})
		}
	}
	for _, c := range p.Spec.InitContainers {
		if len(c.Ports) > 0 && c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			out.Spec.InitContainers = append(out.Spec.InitContainers, corev1.Container{Name: c.Name, Ports: c.Ports, RestartPolicy: c.RestartPolicy})
		}
	}
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady {
			out.Status.Conditions = []corev1.PodCondition{{Type: cond.Type, Status: cond.Status}}
		}
	}
	return out
}

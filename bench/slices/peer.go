package slices

import (
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/endpointslice"
	endpointsliceutil "k8s.io/endpointslice/util"
)

// Peer is the Kubernetes EndpointSlice reconciler, fed pods.
type Peer struct {
	store   *store
	rec     *endpointslice.Reconciler
	service *corev1.Service
}

// NewPeer returns the Kubernetes reconciler writing to a fake clientset.
func NewPeer(maxEndpointsPerSlice int) (*Peer, error) {
	nodes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for i := range Nodes {
		err := nodes.Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name:   nodeName(i),
			Labels: map[string]string{corev1.LabelTopologyZone: zoneName(i)},
		}})
		if err != nil {
			return nil, fmt.Errorf("add node: %w", err)
		}
	}
	s := newStore()
	rec := endpointslice.NewReconciler(s.client, corelisters.NewNodeLister(nodes), int32(maxEndpointsPerSlice),
		endpointsliceutil.NewEndpointSliceTracker(), nil, &record.FakeRecorder{}, "endpointslice-controller.k8s.io")
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: serviceName, Namespace: namespace, UID: "svc-uid"},
		Spec: corev1.ServiceSpec{
			ClusterIP:  "10.96.0.10",
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			Selector:   map[string]string{"app": serviceName},
			Ports: []corev1.ServicePort{{
				Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(targetPort),
			}},
		},
	}
	return &Peer{store: s, rec: rec, service: svc}, nil
}

// Reconcile implements Reconciler.
func (p *Peer) Reconcile(pods []Pod) error {
	existing, err := p.store.list()
	if err != nil {
		return err
	}
	kp := make([]*corev1.Pod, len(pods))
	for i, pod := range pods {
		kp[i] = kubePod(pod)
	}
	if err := p.rec.Reconcile(logr.Discard(), p.service, kp, existing, time.Time{}); err != nil {
		return fmt.Errorf("peer reconcile: %w", err)
	}
	p.store.count()
	return nil
}

// Writes implements Reconciler.
func (p *Peer) Writes() (int, int, int) { return p.store.creates, p.store.updates, p.store.deletes }

// SliceSizes implements Reconciler.
func (p *Peer) SliceSizes() ([]int, []string, error) { return p.store.sizes() }

func podUID(p Pod) types.UID { return types.UID("uid-" + p.Name) }

func kubePod(p Pod) *corev1.Pod {
	ready := corev1.ConditionFalse
	if p.Ready {
		ready = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: namespace, UID: podUID(p), Labels: map[string]string{"app": serviceName}},
		Spec: corev1.PodSpec{
			NodeName:   nodeName(p.Node),
			Containers: []corev1.Container{{Name: "web", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: targetPort}}}},
		},
		Status: corev1.PodStatus{
			Phase:      corev1.PodRunning,
			PodIP:      p.IP,
			PodIPs:     []corev1.PodIP{{IP: p.IP}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: ready}},
		},
	}
}

// Placement implements Reconciler.
func (p *Peer) Placement() (map[string]string, int, error) { return p.store.placement() }

package kubetest

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// PodRunner stands in for the scheduler and the kubelets of a cluster that
// has neither: every Pod is bound to one Node of its own and reported
// Running and Ready with an address from a pod range, and a Pod being
// deleted is removed at once (a kubelet would confirm that its containers
// stopped). Containers never run: what reads Pods (membership, the
// EndpointSlice controller, a conformance suite waiting for Running) sees
// them as a real cluster would show them, but nothing can be exec'd into.
type PodRunner struct {
	client kubernetes.Interface
	node   string
	log    *slog.Logger

	mu          sync.Mutex
	first, last netip.Addr
	next        netip.Addr
	ips         map[string]podIP // by namespace/name
}

type podIP struct {
	uid string
	ip  netip.Addr
}

// NewPodRunner returns a runner that binds Pods to a Node named node and
// gives them addresses of podCIDR.
func NewPodRunner(client kubernetes.Interface, node string, podCIDR netip.Prefix, log *slog.Logger) *PodRunner {
	first := podCIDR.Masked().Addr().Next()
	last := first
	for a := first; a.IsValid() && podCIDR.Contains(a); a = a.Next() {
		last = a
		if a.Is4() && !podCIDR.Contains(a.Next().Next()) {
			break // leave the broadcast address out
		}
	}
	return &PodRunner{client: client, node: node, log: log, first: first, last: last, next: first, ips: map[string]podIP{}}
}

// Run runs Pods until ctx ends.
func (r *PodRunner) Run(ctx context.Context) error {
	if err := r.ensureNode(ctx); err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactory(r.client, 0)
	inf := factory.Core().V1().Pods().Informer()
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	defer queue.ShutDown()
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			queue.Add(key)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, o any) { enqueue(o) }, DeleteFunc: enqueue,
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return ctx.Err()
	}
	go func() {
		<-ctx.Done()
		queue.ShutDown()
	}()
	for {
		key, quit := queue.Get()
		if quit {
			return nil
		}
		obj, exists, _ := inf.GetIndexer().GetByKey(key)
		var err error
		if exists {
			err = r.sync(ctx, obj.(*corev1.Pod))
		} else {
			r.release(key)
		}
		if err != nil && ctx.Err() == nil {
			r.log.Debug("pod not run yet; retrying", "pod", key, "error", err)
			queue.AddRateLimited(key)
		} else {
			queue.Forget(key)
		}
		queue.Done(key)
	}
}

// ensureNode registers the runner's Node, Ready.
func (r *PodRunner) ensureNode(ctx context.Context) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: r.node, Labels: map[string]string{corev1.LabelHostname: r.node}}}
	created, err := r.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("register node %s: %w", r.node, err)
	}
	now := metav1.Now()
	created.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		Message: "pods are run by localkube's pod runner", LastHeartbeatTime: now, LastTransitionTime: now}}
	created.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}
	if _, err := r.client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("node %s status: %w", r.node, err)
	}
	return nil
}

// sync moves one Pod along: deleted at once when being deleted, bound when
// unscheduled, Running and Ready with an address when bound.
func (r *PodRunner) sync(ctx context.Context, p *corev1.Pod) error {
	pods := r.client.CoreV1().Pods(p.Namespace)
	switch {
	case p.DeletionTimestamp != nil:
		zero := int64(0)
		err := pods.Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &p.UID}})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		return err
	case p.Spec.NodeName == "":
		err := pods.Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: p.Name, UID: p.UID},
			Target: corev1.ObjectReference{Kind: "Node", Name: r.node}}, metav1.CreateOptions{})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return nil
		}
		return err
	case p.Status.Phase == corev1.PodRunning || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed:
		return nil
	}
	ip, err := r.allocate(p)
	if err != nil {
		return err
	}
	next := p.DeepCopy()
	now := metav1.NewTime(time.Now())
	next.Status.Phase = corev1.PodRunning
	next.Status.HostIP, next.Status.HostIPs = "127.0.0.1", []corev1.HostIP{{IP: "127.0.0.1"}}
	next.Status.PodIP, next.Status.PodIPs = ip.String(), []corev1.PodIP{{IP: ip.String()}}
	next.Status.StartTime = &now
	next.Status.Conditions = nil
	for _, t := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		next.Status.Conditions = append(next.Status.Conditions, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now})
	}
	next.Status.ContainerStatuses = nil
	for _, c := range p.Spec.Containers {
		next.Status.ContainerStatuses = append(next.Status.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image, Ready: true,
			Started: ptr(true), State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}})
	}
	_, err = pods.UpdateStatus(ctx, next, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func ptr[T any](v T) *T { return &v }

// allocate returns the Pod's address, the same on every call for one Pod.
func (r *PodRunner) allocate(p *corev1.Pod) (netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := p.Namespace + "/" + p.Name
	if cur, ok := r.ips[key]; ok && cur.uid == string(p.UID) {
		return cur.ip, nil
	}
	used := map[netip.Addr]bool{}
	for k, cur := range r.ips {
		if k != key {
			used[cur.ip] = true
		}
	}
	for range 1 << 16 {
		ip := r.next
		if r.next = r.next.Next(); r.last.Less(r.next) {
			r.next = r.first
		}
		if !used[ip] {
			r.ips[key] = podIP{uid: string(p.UID), ip: ip}
			return ip, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("pod range of node %s is full", r.node)
}

// release frees the address of a Pod that is gone.
func (r *PodRunner) release(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.ips, key)
}

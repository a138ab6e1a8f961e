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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// PodRunner stands in for the scheduler and the kubelets of a cluster that
// has neither: every Pod is bound to one Node of its own and reported
// Running, and a Pod being deleted is removed once it has stopped.
//
// Without a runtime, containers never run: a Pod is Running and Ready at
// once with an address of a pod range, so what reads Pods (membership, the
// EndpointSlice controller, a conformance suite waiting for Running) sees
// them as a real cluster would show them, at a scale of thousands. With a
// PodRuntime (UseRuntime; the data plane's), the runtime makes each Pod's
// sandbox and runs its containers, and the runner reports what it says:
// the Pod's addresses, each container's state, readiness and restarts.
type PodRunner struct {
	client  kubernetes.Interface
	node    string
	log     *slog.Logger
	queue   workqueue.TypedRateLimitingInterface[string]
	runtime PodRuntime

	mu          sync.Mutex
	first, last netip.Addr
	next        netip.Addr
	ips         map[string]podIP // by namespace/name
	stopping    map[types.UID]*stopping
}

// stopping is a Pod whose runtime is stopping it.
type stopping struct {
	done bool
	err  error
}

// PodRuntime runs what a Pod asks for, as a kubelet and its container
// runtime do.
type PodRuntime interface {
	// Node is what the Node object says of the node the runtime runs.
	Node() RuntimeNode
	// Sync makes the Pod's sandbox and starts its containers when they are
	// not running yet, and returns their state. It is called again for a
	// Pod whenever the runner is told (Resync) that something changed.
	Sync(ctx context.Context, pod *corev1.Pod) (PodState, error)
	// Remove stops the Pod's containers, giving them grace to exit after
	// their preStop hooks and SIGTERM, and removes its sandbox; a Pod it
	// does not know is no error.
	Remove(uid types.UID, grace time.Duration) error
}

// RuntimeNode is the node a PodRuntime runs Pods on.
type RuntimeNode struct {
	// InternalIP is the node's address, the one kube-proxy programs for.
	InternalIP string
	// KubeletAddress and KubeletPort are where the API server reaches
	// the node's kubelet API (exec, logs): the Node's Hostname address
	// and its kubelet endpoint.
	KubeletAddress string
	KubeletPort    int32
	// Zone is the node's topology.kubernetes.io/zone label, what
	// kube-proxy matches topology hints against.
	Zone string
}

// PodState is what a PodRuntime reports of one Pod.
type PodState struct {
	// IPs are the Pod's addresses, the first the primary.
	IPs []string
	// Containers are in the order of the Pod's spec.
	Containers []ContainerState
}

// ContainerState is one container's state.
type ContainerState struct {
	Name     string
	Running  bool
	Ready    bool
	Restarts int32
	// StartedAt is when it last started; FinishedAt and ExitCode tell how
	// it last ended, when it is not running.
	StartedAt, FinishedAt time.Time
	ExitCode              int32
	// Waiting is why a container that is not running is not, if it is
	// to start (again).
	Waiting string
	// Message says more, for a container that could not start.
	Message string
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
	return &PodRunner{client: client, node: node, log: log, first: first, last: last, next: first, ips: map[string]podIP{}, stopping: map[types.UID]*stopping{},
		queue: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())}
}

// UseRuntime makes rt run the Pods; call it before Run.
func (r *PodRunner) UseRuntime(rt PodRuntime) { r.runtime = rt }

// Resync tells the runner that the Pod namespace/name changed in its
// runtime (a container exited, restarted or became ready).
func (r *PodRunner) Resync(key string) { r.queue.Add(key) }

// Run runs Pods until ctx ends.
func (r *PodRunner) Run(ctx context.Context) error {
	if err := r.ensureNode(ctx); err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactory(r.client, 0)
	inf := factory.Core().V1().Pods().Informer()
	queue := r.queue
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
			err = r.release(key)
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
	addresses := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}
	message := "pods are run by localkube's pod runner"
	if r.runtime != nil {
		rn := r.runtime.Node()
		// The API server prefers the Hostname address for the kubelet API;
		// kube-proxy takes the InternalIP as the node's.
		addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: rn.InternalIP}, {Type: corev1.NodeHostName, Address: rn.KubeletAddress}}
		node.Status.DaemonEndpoints.KubeletEndpoint.Port = rn.KubeletPort
		if rn.Zone != "" {
			node.Labels[corev1.LabelTopologyZone] = rn.Zone
		}
		message = "pods run in network namespaces of localkube's data plane"
	}
	created, err := r.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("register node %s: %w", r.node, err)
	}
	now := metav1.Now()
	created.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		Message: message, LastHeartbeatTime: now, LastTransitionTime: now}}
	created.Status.Addresses = addresses
	created.Status.DaemonEndpoints = node.Status.DaemonEndpoints
	if _, err := r.client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("node %s status: %w", r.node, err)
	}
	return nil
}

// sync moves one Pod along: stopped and deleted when being deleted, bound
// when unscheduled, then Running with what its runtime reports (or, with
// none, Running and Ready with an address at once).
func (r *PodRunner) sync(ctx context.Context, p *corev1.Pod) error {
	pods := r.client.CoreV1().Pods(p.Namespace)
	switch {
	case p.DeletionTimestamp != nil:
		if r.runtime != nil {
			if done, err := r.stopped(p); !done || err != nil {
				return err
			}
		}
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
	case p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed:
		return nil
	case r.runtime == nil && p.Status.Phase == corev1.PodRunning:
		return nil
	}
	state, hostIP, err := r.state(ctx, p)
	if err != nil {
		return err
	}
	next := p.DeepCopy()
	next.Status = podStatus(p, state, hostIP, time.Now())
	if statusEqual(p.Status, next.Status) {
		return nil
	}
	_, err = pods.UpdateStatus(ctx, next, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// state is what the runtime reports of p, or with none, every container
// running and ready with an address of the pod range.
func (r *PodRunner) state(ctx context.Context, p *corev1.Pod) (PodState, string, error) {
	if r.runtime != nil {
		r.remember(p)
		st, err := r.runtime.Sync(ctx, p)
		return st, r.runtime.Node().InternalIP, err
	}
	ip, err := r.allocate(p)
	if err != nil {
		return PodState{}, "", err
	}
	st := PodState{IPs: []string{ip.String()}}
	now := time.Now()
	for _, c := range p.Spec.Containers {
		st.Containers = append(st.Containers, ContainerState{Name: c.Name, Running: true, Ready: true, StartedAt: now})
	}
	return st, "127.0.0.1", nil
}

// stopped starts stopping p's containers in the background, as a kubelet
// does for a Pod being deleted (preStop hooks, SIGTERM, the Pod's grace
// period, SIGKILL), and reports whether that is done. The Pod is synced
// again when it is.
func (r *PodRunner) stopped(p *corev1.Pod) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st, ok := r.stopping[p.UID]
	if !ok {
		st = &stopping{}
		r.stopping[p.UID] = st
		grace := 30 * time.Second
		if p.DeletionGracePeriodSeconds != nil {
			grace = time.Duration(*p.DeletionGracePeriodSeconds) * time.Second
		}
		uid, key := p.UID, p.Namespace+"/"+p.Name
		go func() {
			err := r.runtime.Remove(uid, grace)
			r.mu.Lock()
			st.done, st.err = true, err
			r.mu.Unlock()
			r.queue.Add(key)
		}()
		return false, nil
	}
	if !st.done {
		return false, nil
	}
	delete(r.stopping, p.UID)
	return true, st.err
}

// remember keeps a running Pod's uid, for its removal once it is gone.
func (r *PodRunner) remember(p *corev1.Pod) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ips[p.Namespace+"/"+p.Name] = podIP{uid: string(p.UID)}
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

// release frees the address of a Pod that is gone and, with a runtime,
// stops what it still runs.
func (r *PodRunner) release(key string) error {
	r.mu.Lock()
	cur, ok := r.ips[key]
	delete(r.ips, key)
	r.mu.Unlock()
	if ok && r.runtime != nil {
		if err := r.runtime.Remove(types.UID(cur.uid), 0); err != nil {
			r.mu.Lock()
			r.ips[key] = cur // try again
			r.mu.Unlock()
			return err
		}
	}
	return nil
}

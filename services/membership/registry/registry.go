package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	workloadv1alpha1 "github.com/plexusnet/plexus/api/workload/v1alpha1"
	workloadclient "github.com/plexusnet/plexus/api/workload/v1alpha1/client"
	"github.com/plexusnet/plexus/internal/apierr"
)

// Allocator is what the registry needs of the allocator's API;
// allocatorv1.AllocatorServiceClient has it.
type Allocator interface {
	GetPool(ctx context.Context, in *allocatorv1.GetPoolRequest, opts ...grpc.CallOption) (*allocatorv1.GetPoolResponse, error)
	Allocate(ctx context.Context, in *allocatorv1.AllocateRequest, opts ...grpc.CallOption) (*allocatorv1.AllocateResponse, error)
	GetAllocation(ctx context.Context, in *allocatorv1.GetAllocationRequest, opts ...grpc.CallOption) (*allocatorv1.GetAllocationResponse, error)
	Release(ctx context.Context, in *allocatorv1.ReleaseRequest, opts ...grpc.CallOption) (*allocatorv1.ReleaseResponse, error)
	ListPools(ctx context.Context, in *allocatorv1.ListPoolsRequest, opts ...grpc.CallOption) (*allocatorv1.ListPoolsResponse, error)
}

// Registration is a validated registration request.
type Registration struct {
	Namespace string
	Name      string
	Labels    map[string]string
	// Addresses are canonical; empty when Pool is set.
	Addresses []string
	// Ports have their protocol set.
	Ports    []workloadv1alpha1.WorkloadPort
	Zone     string
	Node     string
	Hostname string
	// Ready is the readiness the workload reports.
	Ready bool
	// TTL is the heartbeat TTL, whole seconds; 0 means the default.
	TTL time.Duration
	// Pool is the allocator pool ("pools/{id}") to take the address from.
	Pool string
}

// maxAttempts bounds the retries of a write that lost a resourceVersion race.
// Sixteen registrations of one workload at once each lose at most fifteen.
const maxAttempts = 24

// Option configures a Registry.
type Option func(*Registry)

// WithLogger sets the logger (default slog.Default).
func WithLogger(l *slog.Logger) Option { return func(r *Registry) { r.logger = l } }

// WithRegisterer registers the registry's metrics.
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(r *Registry) { r.registerer = reg }
}

// WithAddressBook makes registrations with addresses of their own refuse an
// address a Pod or another workload already uses.
func WithAddressBook(b AddressBook) Option { return func(r *Registry) { r.book = b } }

// Registry registers, heartbeats and deregisters external workloads.
type Registry struct {
	client     rest.Interface
	alloc      Allocator
	book       AddressBook
	cluster    string
	logger     *slog.Logger
	now        func() time.Time
	registerer prometheus.Registerer

	registrations   *prometheus.CounterVec
	heartbeats      prometheus.Counter
	deregistrations prometheus.Counter
	releaseFailures prometheus.Counter
}

// New returns a Registry writing through client (a REST client of the
// ExternalWorkload API) and allocating from alloc (may be nil when no
// registration names a pool). cluster is the owner cluster of allocations.
func New(client rest.Interface, alloc Allocator, cluster string, opts ...Option) (*Registry, error) {
	r := &Registry{client: client, alloc: alloc, cluster: cluster, logger: slog.Default(), now: time.Now}
	for _, o := range opts {
		o(r)
	}
	r.registrations = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "plexus_membership_registrations_total",
		Help: "RegisterWorkload calls by result: created, updated, unchanged or error.",
	}, []string{"result"})
	r.heartbeats = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "plexus_membership_heartbeats_total",
		Help: "Heartbeats recorded.",
	})
	r.deregistrations = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "plexus_membership_deregistrations_total",
		Help: "Workloads deregistered.",
	})
	r.releaseFailures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "plexus_membership_release_failures_total",
		Help: "Addresses of deregistered workloads that could not be released (left for repair).",
	})
	if r.registerer != nil {
		for _, c := range []prometheus.Collector{r.registrations, r.heartbeats, r.deregistrations, r.releaseFailures} {
			if err := r.registerer.Register(c); err != nil {
				return nil, fmt.Errorf("register metrics: %w", err)
			}
		}
	}
	return r, nil
}

func (r *Registry) workloads(namespace string) *workloadclient.ExternalWorkloads {
	return workloadclient.ForNamespace(r.client, namespace)
}

// Get returns a workload.
func (r *Registry) Get(ctx context.Context, namespace, name string) (*workloadv1alpha1.ExternalWorkload, error) {
	ew, err := r.workloads(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, kubeError("get workload "+namespace+"/"+name, err)
	}
	return ew, nil
}

// List returns a page of workloads of a namespace ("" for all) matching a
// label selector, and the token of the next page ("" on the last).
func (r *Registry) List(ctx context.Context, namespace, selector string, limit int64, token string) ([]workloadv1alpha1.ExternalWorkload, string, error) {
	list, err := r.workloads(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector, Limit: limit, Continue: token})
	if err != nil {
		if apierrors.IsResourceExpired(err) || (token != "" && apierrors.IsBadRequest(err)) {
			return nil, "", fmt.Errorf("list workloads: %w", ErrInvalidPageToken)
		}
		return nil, "", kubeError("list workloads", err)
	}
	return list.Items, list.Continue, nil
}

// Register creates or updates a workload, allocates its address when it
// names a pool, and records the registration as a heartbeat. created
// reports whether this call created the object.
func (r *Registry) Register(ctx context.Context, reg Registration) (ew *workloadv1alpha1.ExternalWorkload, created bool, err error) {
	defer func() {
		result := "error"
		switch {
		case err != nil:
		case created:
			result = "created"
		default:
			result = "updated"
		}
		r.registrations.WithLabelValues(result).Inc()
	}()
	if reg.Pool != "" {
		if err := r.checkPool(ctx, reg.Pool); err != nil {
			return nil, false, err
		}
	}
	if err := r.checkAddresses(ctx, reg); err != nil {
		return nil, false, err
	}
	ew, created, stale, err := r.upsert(ctx, reg)
	if err != nil {
		return nil, false, err
	}
	allocation := ""
	if reg.Pool != "" {
		if ew, allocation, err = r.recordAllocation(ctx, ew, created); err != nil {
			return nil, false, err
		}
	}
	uid := ew.UID
	ew, err = r.updateStatus(ctx, ew, func(w *workloadv1alpha1.ExternalWorkload) (bool, error) {
		if w.UID != uid {
			return false, fmt.Errorf("workload %s/%s was replaced while registering: %w", reg.Namespace, reg.Name, ErrConflict)
		}
		changed := r.report(w, reg.Ready)
		if w.Status.Allocation != allocation {
			w.Status.Allocation = allocation
			changed = true
		}
		return changed, nil
	})
	if err != nil {
		if errors.Is(err, ErrConflict) && allocation != "" {
			// Replaced while registering: the allocation belongs to an
			// object that is gone.
			r.release(ew, staleAllocation{pool: reg.Pool, name: allocation, uid: uid})
		}
		return nil, false, err
	}
	if stale.pool != "" {
		r.release(ew, stale)
	}
	r.logger.Info("workload registered", "workload", reg.Namespace+"/"+reg.Name, "uid", ew.UID,
		"created", created, "addresses", ew.Spec.WorkloadIPs, "allocation", allocation)
	return ew, created, nil
}

// recordAllocation allocates the workload's address and records it in the
// spec. When that fails, nothing is left behind: an object this
// registration created is deleted, and an allocation the object does not
// already record (it could not be recorded, or the object went away or was
// replaced meanwhile, for example by a racing deregistration) is released,
// guarded by the owner's uid so that an address that changed hands is never
// freed.
func (r *Registry) recordAllocation(ctx context.Context, ew *workloadv1alpha1.ExternalWorkload, created bool) (*workloadv1alpha1.ExternalWorkload, string, error) {
	a, err := r.allocate(ctx, ew)
	if err != nil {
		if created {
			r.rollback(ew)
		}
		return nil, "", err
	}
	out, err := r.setAddress(ctx, ew, a.GetAddress())
	if err == nil {
		return out, a.GetName(), nil
	}
	if created {
		r.rollback(ew)
	}
	if created || ew.Status.Allocation != a.GetName() {
		r.release(ew, staleAllocation{pool: ew.Spec.Pool, name: a.GetName(), uid: ew.UID})
	}
	return nil, "", err
}

// staleAllocation is an address a workload held before a registration moved
// it to another pool or to addresses of its own.
type staleAllocation struct {
	pool, name string
	uid        types.UID
}

// checkPool fails with ErrPoolNotFound before anything is written when the
// pool does not exist.
func (r *Registry) checkPool(ctx context.Context, pool string) error {
	if r.alloc == nil {
		return fmt.Errorf("pool %s: %w: no allocator configured", pool, ErrAllocatorUnavailable)
	}
	if _, err := r.alloc.GetPool(ctx, &allocatorv1.GetPoolRequest{Name: pool}); err != nil {
		return allocatorError("get pool "+pool, err)
	}
	return nil
}

// desired returns the object a registration describes. Defaults the API
// server would fill in are filled in here, so that comparing with a stored
// object finds no difference where there is none.
func desired(reg Registration) *workloadv1alpha1.ExternalWorkload {
	ttl := int32(reg.TTL / time.Second)
	if ttl <= 0 {
		ttl = workloadv1alpha1.DefaultTTLSeconds
	}
	return &workloadv1alpha1.ExternalWorkload{
		ObjectMeta: metav1.ObjectMeta{Namespace: reg.Namespace, Name: reg.Name, Labels: reg.Labels},
		Spec: workloadv1alpha1.ExternalWorkloadSpec{
			WorkloadIPs: reg.Addresses,
			Ports:       reg.Ports,
			Zone:        reg.Zone,
			Node:        reg.Node,
			Hostname:    reg.Hostname,
			Pool:        reg.Pool,
			TTLSeconds:  ttl,
		},
	}
}

// upsert creates the object or brings the existing one to the
// registration, retrying when it loses a race.
func (r *Registry) upsert(ctx context.Context, reg Registration) (*workloadv1alpha1.ExternalWorkload, bool, staleAllocation, error) {
	want := desired(reg)
	client := r.workloads(reg.Namespace)
	for attempt := range maxAttempts {
		if attempt > 0 {
			backoff(ctx, attempt)
		}
		out, err := client.Create(ctx, want, metav1.CreateOptions{})
		if err == nil {
			return out, true, staleAllocation{}, nil
		}
		if apierrors.IsNotFound(err) {
			// A create is refused with NotFound only for its namespace.
			return nil, false, staleAllocation{}, fmt.Errorf("create workload %s/%s: namespace %s: %w", reg.Namespace, reg.Name, reg.Namespace, ErrNamespaceNotFound)
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, false, staleAllocation{}, kubeError("create workload "+reg.Namespace+"/"+reg.Name, err)
		}
		cur, err := client.Get(ctx, reg.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue // deleted in between: create again
		}
		if err != nil {
			return nil, false, staleAllocation{}, kubeError("get workload "+reg.Namespace+"/"+reg.Name, err)
		}
		next := cur.DeepCopy()
		next.Labels = want.Labels
		next.Spec = *want.Spec.DeepCopy()
		if reg.Pool != "" {
			// The addresses stay until the allocation replaces them: from
			// the same pool it is the same address, and from another one
			// the endpoint keeps working until the new address is there.
			next.Spec.WorkloadIPs = cur.Spec.WorkloadIPs
		}
		var stale staleAllocation
		if cur.Spec.Pool != "" && cur.Spec.Pool != reg.Pool {
			stale = staleAllocation{pool: cur.Spec.Pool, name: cur.Status.Allocation, uid: cur.UID}
		}
		if equality.Semantic.DeepEqual(cur.Labels, next.Labels) && equality.Semantic.DeepEqual(cur.Spec, next.Spec) {
			return cur, false, staleAllocation{}, nil
		}
		out, err = client.Update(ctx, next, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, false, staleAllocation{}, kubeError("update workload "+reg.Namespace+"/"+reg.Name, err)
		}
		return out, false, stale, nil
	}
	return nil, false, staleAllocation{}, fmt.Errorf("register workload %s/%s: %w", reg.Namespace, reg.Name, ErrConflict)
}

// backoff waits a little, more after each lost race, with jitter so that
// racing writers spread out.
func backoff(ctx context.Context, attempt int) {
	d := time.Duration(1+rand.IntN(4*min(attempt, 10))) * time.Millisecond
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (r *Registry) owner(ew *workloadv1alpha1.ExternalWorkload) *allocatorv1.Owner {
	return &allocatorv1.Owner{
		Cluster:   r.cluster,
		Kind:      workloadv1alpha1.KindExternalWorkload,
		Namespace: ew.Namespace,
		Name:      ew.Name,
		Uid:       string(ew.UID),
	}
}

// allocate returns the workload's allocation in its pool, making it if
// needed. The allocator answers per owner (cluster, kind, namespace, name)
// whatever the uid, so an allocation still held by an earlier object of
// this name comes back: that object is gone (names are unique), so its
// allocation is released, guarded by etag and uid, and allocated anew.
func (r *Registry) allocate(ctx context.Context, ew *workloadv1alpha1.ExternalWorkload) (*allocatorv1.Allocation, error) {
	pool := ew.Spec.Pool
	req := &allocatorv1.AllocateRequest{
		Pool:  pool,
		Owner: r.owner(ew),
		// The uid and the pool identify this object's allocation: a retry
		// after a lost reply gets the same answer.
		RequestId: "externalworkload/" + string(ew.UID) + "/" + pool,
	}
	for range 3 {
		resp, err := r.alloc.Allocate(ctx, req)
		if err != nil {
			return nil, allocatorError("allocate from "+pool, err)
		}
		a := resp.GetAllocation()
		if a.GetOwner().GetUid() == string(ew.UID) {
			return a, nil
		}
		r.logger.Warn("releasing an address held by an earlier workload of the same name",
			"workload", ew.Namespace+"/"+ew.Name, "allocation", a.GetName(), "earlier_uid", a.GetOwner().GetUid())
		_, err = r.alloc.Release(ctx, &allocatorv1.ReleaseRequest{
			Name: a.GetName(), Etag: a.GetEtag(), OwnerUid: a.GetOwner().GetUid(), AllowMissing: true,
		})
		if err != nil && !isMismatch(err) {
			return nil, allocatorError("release "+a.GetName(), err)
		}
		// The request id may have been recorded with the earlier answer.
		req.RequestId = ""
	}
	return nil, fmt.Errorf("allocate from %s for %s/%s: %w", pool, ew.Namespace, ew.Name, ErrConflict)
}

func isMismatch(err error) bool {
	switch apierr.Reason(err) {
	case reasonEtagMismatch, reasonOwnerMismatch, reasonAllocationNotFound:
		return true
	}
	return false
}

// setAddress records an allocated address in the spec, where endpoints
// read it.
func (r *Registry) setAddress(ctx context.Context, ew *workloadv1alpha1.ExternalWorkload, addr string) (*workloadv1alpha1.ExternalWorkload, error) {
	client := r.workloads(ew.Namespace)
	uid := ew.UID
	for attempt := range maxAttempts {
		if attempt > 0 {
			backoff(ctx, attempt)
		}
		if slices.Equal(ew.Spec.WorkloadIPs, []string{addr}) {
			return ew, nil
		}
		next := ew.DeepCopy()
		next.Spec.WorkloadIPs = []string{addr}
		out, err := client.Update(ctx, next, metav1.UpdateOptions{})
		if err == nil {
			return out, nil
		}
		if !apierrors.IsConflict(err) {
			return nil, kubeError("set address of "+ew.Namespace+"/"+ew.Name, err)
		}
		if ew, err = client.Get(ctx, ew.Name, metav1.GetOptions{}); err != nil {
			return nil, kubeError("get workload "+next.Namespace+"/"+next.Name, err)
		}
		if ew.UID != uid || ew.Spec.Pool != next.Spec.Pool {
			return nil, fmt.Errorf("workload %s/%s changed while its address was allocated: %w", next.Namespace, next.Name, ErrConflict)
		}
	}
	return nil, fmt.Errorf("set address of %s/%s: %w", ew.Namespace, ew.Name, ErrConflict)
}

// updateStatus applies mutate to the workload's status and writes it
// through the status subresource, guarded by resourceVersion, reading the
// object again after each lost race. mutate reports whether it changed
// anything; nothing is written when it did not.
func (r *Registry) updateStatus(ctx context.Context, ew *workloadv1alpha1.ExternalWorkload, mutate func(*workloadv1alpha1.ExternalWorkload) (bool, error)) (*workloadv1alpha1.ExternalWorkload, error) {
	client := r.workloads(ew.Namespace)
	for attempt := range maxAttempts {
		if attempt > 0 {
			backoff(ctx, attempt)
		}
		next := ew.DeepCopy()
		changed, err := mutate(next)
		if err != nil {
			return nil, err
		}
		if !changed {
			return ew, nil
		}
		out, err := client.UpdateStatus(ctx, next, metav1.UpdateOptions{})
		if err == nil {
			return out, nil
		}
		if !apierrors.IsConflict(err) {
			return nil, kubeError("update status of "+ew.Namespace+"/"+ew.Name, err)
		}
		name := ew.Name
		if ew, err = client.Get(ctx, name, metav1.GetOptions{}); err != nil {
			return nil, kubeError("get workload "+next.Namespace+"/"+name, err)
		}
	}
	return nil, fmt.Errorf("update status of %s/%s: %w", ew.Namespace, ew.Name, ErrConflict)
}

// report records a heartbeat with the readiness the workload reports. A
// heartbeat less than a tenth of the TTL (at most a second) old is not
// written again, so that racing registrations and chatty clients do not
// turn into a write each.
func (r *Registry) report(w *workloadv1alpha1.ExternalWorkload, ready bool) bool {
	now := r.now()
	st := metav1.ConditionFalse
	msg := "the workload reports it is not ready"
	if ready {
		st, msg = metav1.ConditionTrue, "the workload reports it is ready"
	}
	changed := meta.SetStatusCondition(&w.Status.Conditions, metav1.Condition{
		Type:               workloadv1alpha1.ConditionReady,
		Status:             st,
		Reason:             workloadv1alpha1.ReasonReported,
		Message:            msg,
		ObservedGeneration: w.Generation,
		LastTransitionTime: metav1.NewTime(now),
	})
	if w.Status.ObservedGeneration != w.Generation {
		w.Status.ObservedGeneration = w.Generation
		changed = true
	}
	fresh := min(w.TTL()/10, time.Second)
	if hb := w.Status.LastHeartbeatTime; changed || hb == nil || now.Sub(hb.Time) >= fresh || now.Before(hb.Time) {
		t := metav1.NewMicroTime(now)
		w.Status.LastHeartbeatTime = &t
		changed = true
	}
	return changed
}

// ReportedReady returns the readiness a workload last reported: its Ready
// condition is True, or False only because its heartbeat expired (the
// sweeper expires only workloads that reported ready).
func ReportedReady(w *workloadv1alpha1.ExternalWorkload) bool {
	c := meta.FindStatusCondition(w.Status.Conditions, workloadv1alpha1.ConditionReady)
	if c == nil {
		return false
	}
	return c.Status == metav1.ConditionTrue || c.Reason == workloadv1alpha1.ReasonHeartbeatExpired
}

// Heartbeat records that a workload is alive, with a new readiness when
// ready is set and the one it reported last otherwise.
func (r *Registry) Heartbeat(ctx context.Context, namespace, name string, ready *bool) (*workloadv1alpha1.ExternalWorkload, error) {
	ew, err := r.Get(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	ew, err = r.updateStatus(ctx, ew, func(w *workloadv1alpha1.ExternalWorkload) (bool, error) {
		rep := ReportedReady(w)
		if ready != nil {
			rep = *ready
		}
		return r.report(w, rep), nil
	})
	if err != nil {
		return nil, err
	}
	r.heartbeats.Inc()
	return ew, nil
}

// Deregister deletes a workload, only at the version etag when set, and
// releases its allocated address. It returns the released allocation's name
// ("" when there was none). With allowMissing a missing workload is not an
// error.
func (r *Registry) Deregister(ctx context.Context, namespace, name, etag string, allowMissing bool) (string, error) {
	client := r.workloads(namespace)
	var ew *workloadv1alpha1.ExternalWorkload
	for attempt := 0; ; attempt++ {
		if attempt == maxAttempts {
			return "", fmt.Errorf("deregister %s/%s: %w", namespace, name, ErrConflict)
		}
		if attempt > 0 {
			backoff(ctx, attempt)
		}
		var err error
		ew, err = r.Get(ctx, namespace, name)
		if errors.Is(err, ErrNotFound) && allowMissing {
			return "", nil
		}
		if err != nil {
			return "", err
		}
		if etag != "" && etag != ew.ResourceVersion {
			return "", fmt.Errorf("workload %s/%s is at %s, not %s: %w", namespace, name, ew.ResourceVersion, etag, ErrEtagMismatch)
		}
		// The resourceVersion precondition makes sure the allocation
		// released below is the one of the object deleted.
		uid, rv := ew.UID, ew.ResourceVersion
		err = client.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
		if err == nil {
			break
		}
		switch {
		case apierrors.IsNotFound(err) && allowMissing:
			return "", nil
		case apierrors.IsConflict(err) && etag != "":
			return "", fmt.Errorf("workload %s/%s changed: %w", namespace, name, ErrEtagMismatch)
		case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
			continue // changed (a heartbeat) or replaced: look again
		}
		return "", kubeError("delete workload "+namespace+"/"+name, err)
	}
	r.deregistrations.Inc()
	released := ""
	if ew.Spec.Pool != "" {
		released = r.release(ew, staleAllocation{pool: ew.Spec.Pool, name: ew.Status.Allocation, uid: ew.UID})
	}
	r.logger.Info("workload deregistered", "workload", namespace+"/"+name, "uid", ew.UID, "released", released)
	return released, nil
}

// release frees an allocation a workload no longer uses, guarded so that an
// address that changed hands is never freed. It works on a context of its
// own: the workload is already gone or moved, and the caller's deadline
// should not leave the address behind. A failure is logged and counted; the
// address is then a leak that repair reclaims. It returns the released
// allocation's name, "" when nothing was released.
func (r *Registry) release(ew *workloadv1alpha1.ExternalWorkload, s staleAllocation) string {
	if r.alloc == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	name, err := r.releaseOnce(ctx, ew, s)
	if err != nil {
		r.releaseFailures.Inc()
		r.logger.Warn("could not release the address of a workload; repair will reclaim it",
			"workload", ew.Namespace+"/"+ew.Name, "uid", s.uid, "pool", s.pool, "allocation", s.name, "error", err)
	}
	return name
}

func (r *Registry) releaseOnce(ctx context.Context, ew *workloadv1alpha1.ExternalWorkload, s staleAllocation) (string, error) {
	uid := string(s.uid)
	if s.name == "" {
		// The allocation was made but not recorded yet (the registration
		// was cut short): release whatever this owner holds in the pool.
		resp, err := r.alloc.Release(ctx, &allocatorv1.ReleaseRequest{
			Pool: s.pool, Owner: r.owner(ew), OwnerUid: uid, AllowMissing: true,
		})
		if err != nil {
			if isMismatch(err) {
				return "", nil
			}
			return "", err
		}
		return resp.GetAllocation().GetName(), nil
	}
	for range 3 {
		got, err := r.alloc.GetAllocation(ctx, &allocatorv1.GetAllocationRequest{Name: s.name})
		if apierr.Reason(err) == reasonAllocationNotFound {
			return "", nil
		}
		if err != nil {
			return "", err
		}
		a := got.GetAllocation()
		if a.GetOwner().GetUid() != uid {
			return "", nil // someone else's now
		}
		resp, err := r.alloc.Release(ctx, &allocatorv1.ReleaseRequest{
			Name: s.name, Etag: a.GetEtag(), OwnerUid: uid, AllowMissing: true,
		})
		// The client does not retry a Release that may have reached the
		// allocator (UNAVAILABLE): this one is guarded by the etag just
		// read, so read again and send it again.
		if apierr.Reason(err) == reasonEtagMismatch || status.Code(err) == codes.Unavailable {
			continue
		}
		if err != nil {
			if isMismatch(err) {
				return "", nil
			}
			return "", err
		}
		return resp.GetAllocation().GetName(), nil
	}
	return "", fmt.Errorf("release %s: %w", s.name, ErrConflict)
}

// rollback deletes an object this registration created when its allocation
// failed, so that a refused registration leaves nothing behind.
func (r *Registry) rollback(ew *workloadv1alpha1.ExternalWorkload) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	uid := ew.UID
	err := r.workloads(ew.Namespace).Delete(ctx, ew.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) {
		r.logger.Warn("could not delete a workload whose registration failed", "workload", ew.Namespace+"/"+ew.Name, "error", err)
	}
}

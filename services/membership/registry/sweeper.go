package registry

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	workloadv1alpha1 "github.com/plexusnet/plexus/api/workload/v1alpha1"
	workloadclient "github.com/plexusnet/plexus/api/workload/v1alpha1/client"
)

// Sweeper turns external workloads not-ready when their heartbeats stop:
// Ready False, reason HeartbeatExpired. It schedules each ready workload for
// the moment its heartbeat expires, from the shared informer's events, so it
// never scans. Every replica runs one; the write is guarded by the
// resourceVersion the sweeper saw, so a heartbeat that lands first wins and
// only one replica's write succeeds.
type Sweeper struct {
	client   rest.Interface
	informer cache.SharedIndexInformer
	handler  cache.ResourceEventHandlerRegistration
	queue    workqueue.TypedRateLimitingInterface[string]
	logger   *slog.Logger
	expired  prometheus.Counter

	registerer prometheus.Registerer
}

// SweeperOption configures a Sweeper.
type SweeperOption func(*Sweeper)

// SweepWithLogger sets the logger (default slog.Default).
func SweepWithLogger(l *slog.Logger) SweeperOption { return func(s *Sweeper) { s.logger = l } }

// SweepWithRegisterer registers the sweeper's metrics.
func SweepWithRegisterer(reg prometheus.Registerer) SweeperOption {
	return func(s *Sweeper) { s.registerer = reg }
}

// NewSweeper returns a Sweeper over the workloads of informer, writing
// through client (a REST client of the ExternalWorkload API). The informer
// is run by its owner; Run only waits for it.
func NewSweeper(client rest.Interface, informer cache.SharedIndexInformer, opts ...SweeperOption) (*Sweeper, error) {
	s := &Sweeper{
		client:   client,
		informer: informer,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "membership_heartbeats"}),
		logger: slog.Default(),
		expired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "plexus_membership_heartbeat_expirations_total",
			Help: "External workloads turned not-ready because their heartbeat expired.",
		}),
	}
	for _, o := range opts {
		o(s)
	}
	if s.registerer != nil {
		if err := s.registerer.Register(s.expired); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	reg, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    s.schedule,
		UpdateFunc: func(_, obj any) { s.schedule(obj) },
	})
	if err != nil {
		return nil, fmt.Errorf("add heartbeat handler: %w", err)
	}
	s.handler = reg
	return s, nil
}

// schedule queues a ready workload for when its heartbeat expires.
func (s *Sweeper) schedule(obj any) {
	ew, ok := obj.(*workloadv1alpha1.ExternalWorkload)
	if !ok || !meta.IsStatusConditionTrue(ew.Status.Conditions, workloadv1alpha1.ConditionReady) {
		return
	}
	key, err := cache.MetaNamespaceKeyFunc(ew)
	if err != nil {
		return
	}
	s.queue.AddAfter(key, ew.HeartbeatExpiry().Sub(time.Now()))
}

// Run expires workloads until ctx ends.
func (s *Sweeper) Run(ctx context.Context, workers int) {
	defer s.queue.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), s.handler.HasSynced) {
		return
	}
	var wg sync.WaitGroup
	for range max(workers, 1) {
		wg.Go(func() {
			for s.processNext(ctx) {
			}
		})
	}
	<-ctx.Done()
	s.queue.ShutDown()
	wg.Wait()
}

func (s *Sweeper) processNext(ctx context.Context) bool {
	key, quit := s.queue.Get()
	if quit {
		return false
	}
	defer s.queue.Done(key)
	retry, after, err := s.sweep(ctx, key)
	switch {
	case err != nil && retry:
		s.logger.Warn("expiring a heartbeat failed, retrying", "workload", key, "error", err)
		s.queue.AddRateLimited(key)
	case after > 0:
		s.queue.Forget(key)
		s.queue.AddAfter(key, after)
	default:
		s.queue.Forget(key)
	}
	return true
}

// sweep expires one workload if its heartbeat is past; otherwise it says
// how long until it is.
func (s *Sweeper) sweep(ctx context.Context, key string) (retry bool, after time.Duration, err error) {
	obj, exists, err := s.informer.GetIndexer().GetByKey(key)
	if err != nil {
		return true, 0, err
	}
	ew, ok := obj.(*workloadv1alpha1.ExternalWorkload)
	if !exists || !ok || !meta.IsStatusConditionTrue(ew.Status.Conditions, workloadv1alpha1.ConditionReady) {
		return false, 0, nil
	}
	now := time.Now()
	expiry := ew.HeartbeatExpiry()
	if wait := expiry.Sub(now); wait > 0 {
		return false, wait, nil
	}
	next := ew.DeepCopy()
	meta.SetStatusCondition(&next.Status.Conditions, metav1.Condition{
		Type:               workloadv1alpha1.ConditionReady,
		Status:             metav1.ConditionFalse,
		Reason:             workloadv1alpha1.ReasonHeartbeatExpired,
		Message:            fmt.Sprintf("no heartbeat for %s (ttl %s)", now.Sub(expiry.Add(-ew.TTL())).Round(time.Millisecond), ew.TTL()),
		ObservedGeneration: ew.Generation,
		LastTransitionTime: metav1.NewTime(now),
	})
	_, err = workloadclient.ForNamespace(s.client, ew.Namespace).UpdateStatus(ctx, next, metav1.UpdateOptions{})
	switch {
	case err == nil:
		s.expired.Inc()
		s.logger.Info("workload heartbeat expired, marked not ready", "workload", key,
			"last_heartbeat", expiry.Add(-ew.TTL()), "ttl", ew.TTL())
		return false, 0, nil
	case apierrors.IsConflict(err), apierrors.IsNotFound(err):
		// A heartbeat, another replica's sweep or a deletion came first;
		// its event schedules the workload again if it is still ready.
		return false, 0, nil
	}
	return true, 0, fmt.Errorf("update status of %s: %w", key, err)
}

// Package policywatch follows the clusterset policy (the ClusterSetPolicy
// named clusterset, group policy.plexus.dev) in a member cluster through
// an informer and keeps its parsed form (package exportpolicy) at hand for
// membership and the importer, which both read it and act when it
// changes.
package policywatch

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	policyv1alpha1 "github.com/plexusnet/plexus/api/policy/v1alpha1"
	"github.com/plexusnet/plexus/internal/exportpolicy"
)

// Watcher holds the member cluster's clusterset policy as its informer
// last saw it.
type Watcher struct {
	factory dynamicinformer.DynamicSharedInformerFactory
	reg     cache.ResourceEventHandlerRegistration
	logger  *slog.Logger
	valid   prometheus.Gauge

	current atomic.Pointer[exportpolicy.Policy]

	mu   sync.Mutex
	subs []func()
}

// New builds a Watcher over the member cluster's API; Run runs it. reg,
// when set, receives plexus_clusterset_policy_valid.
func New(client dynamic.Interface, logger *slog.Logger, reg prometheus.Registerer) (*Watcher, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	w := &Watcher{logger: logger, valid: prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "plexus_clusterset_policy_valid",
		Help: "0 while the cluster's ClusterSetPolicy does not parse (every export and import is refused), 1 otherwise.",
	})}
	w.valid.Set(1)
	if reg != nil {
		if err := reg.Register(w.valid); err != nil {
			return nil, err
		}
	}
	w.factory = dynamicinformer.NewFilteredDynamicSharedInformerFactory(client, 0, metav1.NamespaceAll, func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", policyv1alpha1.PolicyName).String()
	})
	inf := w.factory.ForResource(policyv1alpha1.ClusterSetPoliciesResource).Informer()
	var err error
	w.reg, err = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.set(obj) },
		UpdateFunc: func(_, obj any) { w.set(obj) },
		DeleteFunc: func(any) { w.set(nil) },
	})
	return w, err
}

// OnChange adds fn to the functions called after the policy changed. They
// run on the informer's goroutine and must not block.
func (w *Watcher) OnChange(fn func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.subs = append(w.subs, fn)
}

// Current returns the policy; nil when the cluster has none, which permits
// everything.
func (w *Watcher) Current() *exportpolicy.Policy { return w.current.Load() }

// HasSynced reports whether the policy has been read once: before, Current
// would say "no policy" for a cluster that has one.
func (w *Watcher) HasSynced() bool { return w.reg.HasSynced() }

// Run follows the policy until ctx ends.
func (w *Watcher) Run(ctx context.Context) {
	w.factory.Start(ctx.Done())
	<-ctx.Done()
	w.factory.Shutdown()
}

func (w *Watcher) set(obj any) {
	var p *exportpolicy.Policy
	if u, ok := obj.(*unstructured.Unstructured); ok && u.GetName() == policyv1alpha1.PolicyName {
		p = w.parse(u)
	}
	w.current.Store(p)
	if p.Err() == nil {
		w.valid.Set(1)
	} else {
		w.valid.Set(0)
	}
	w.mu.Lock()
	subs := w.subs
	w.mu.Unlock()
	for _, fn := range subs {
		fn()
	}
}

// parse reads the object; one that does not parse refuses everything.
func (w *Watcher) parse(u *unstructured.Unstructured) *exportpolicy.Policy {
	data, err := u.MarshalJSON()
	if err == nil {
		var p *exportpolicy.Policy
		if p, err = exportpolicy.Parse(data); err == nil {
			w.logger.Info("clusterset policy read", "resourceVersion", u.GetResourceVersion())
			return p
		}
	}
	w.logger.Error("clusterset policy does not parse; every export and import is refused until it is fixed",
		"resourceVersion", u.GetResourceVersion(), "error", err)
	return exportpolicy.Invalid(u.GetResourceVersion(), err)
}

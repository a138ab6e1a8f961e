package controller

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	membershipv1 "github.com/plexusnet/plexus/api/membership/v1"
	"github.com/plexusnet/plexus/services/membership/endpoints"
	"github.com/plexusnet/plexus/services/membership/kube"
	"github.com/plexusnet/plexus/services/membership/selector"
	"github.com/plexusnet/plexus/services/membership/watch"
)

var labelsEverything = labels.Everything()

// sync recomputes one Service's endpoint set from the caches and publishes
// it when it changed. It reads nothing but the caches, so it fails only when
// they do.
func (c *Controller) sync(ctx context.Context, key selector.ServiceKey) (err error) {
	start := time.Now()
	taken := c.takeObservation(key)
	parent := ctx
	if taken.span.IsValid() {
		parent = trace.ContextWithSpanContext(ctx, taken.span)
	}
	_, span := c.tracer.Start(parent, "membership.reconcile", trace.WithAttributes(
		attribute.String("k8s.namespace", key.Namespace),
		attribute.String("k8s.service", key.Name),
	))
	result := "error"
	defer func() {
		c.metrics.reconcile.WithLabelValues(result).Observe(time.Since(start).Seconds())
		span.SetAttributes(attribute.String("membership.result", result))
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
			c.restoreObservation(key, taken)
		}
		span.End()
	}()
	obs := taken
	if obs.at.IsZero() {
		// A retry whose change was reported already, or a Service queued
		// by nobody in particular: the reconcile itself is the observation.
		obs = observation{at: start, span: span.SpanContext()}
	}
	result, err = c.reconcile(ctx, key, obs, span)
	return err
}

// reconcile publishes the endpoint set of the Service key names when it
// differs from the hub's. It returns the result the metrics count
// (changed, unchanged, deleted, error); a failed status write is returned
// with the result, so that the reconcile is retried without holding back
// the endpoints.
func (c *Controller) reconcile(ctx context.Context, key selector.ServiceKey, obs observation, span trace.Span) (string, error) {
	svc, err := c.caches.Services.Services(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		return c.removed(ctx, key, obs, span)
	}
	if err != nil {
		return "error", fmt.Errorf("get service %s/%s from cache: %w", key.Namespace, key.Name, err)
	}
	export, statusErr, err := c.exportOf(ctx, svc)
	if err != nil {
		return "error", err
	}
	workloads, err := c.workloadsOf(key, svc)
	if err != nil {
		return "error", err
	}
	set := endpoints.Compute(kube.ServiceModel(svc), workloads, endpoints.WithClusterName(c.opts.ClusterName))
	value := kube.ServiceEndpoints(svc, &set, export)
	span.SetAttributes(attribute.Int("membership.workloads", len(workloads)))

	wkey := watch.Key(key)
	cur, curExported, _, _, ok := c.hub.Get(wkey)
	if ok && curExported == (export != nil) && proto.Equal(cur, value) {
		return "unchanged", statusErr
	}
	rev := c.hub.Publish(watch.Change[*membershipv1.ServiceEndpoints]{
		Key: wkey, Present: true, Value: value, Exported: export != nil,
		ObserveTime: obs.at, TraceContext: c.traceContext(obs.span),
	})
	c.published(key, rev, obs, span)
	return "changed", statusErr
}

// removed handles a Service that is gone: its ServiceExport, if any, says
// so in its status, and its deletion is published once.
func (c *Controller) removed(ctx context.Context, key selector.ServiceKey, obs observation, span trace.Span) (string, error) {
	if export, _ := c.caches.Exports.ServiceExports(key.Namespace).Get(key.Name); export != nil {
		_, conds := exportConditions(nil)
		if err := c.caches.WriteExportStatus(ctx, export, conds); err != nil {
			return "error", err
		}
	}
	wkey := watch.Key(key)
	if _, _, _, _, ok := c.hub.Get(wkey); !ok {
		return "unchanged", nil
	}
	rev := c.hub.Publish(watch.Change[*membershipv1.ServiceEndpoints]{
		Key: wkey, ObserveTime: obs.at, TraceContext: c.traceContext(obs.span),
	})
	c.published(key, rev, obs, span)
	return "deleted", nil
}

// exportOf writes the status of svc's ServiceExport and returns it when
// the clusterset can serve svc; nil when svc is not exported or not valid
// for export. statusErr is the status write's failure.
func (c *Controller) exportOf(ctx context.Context, svc *corev1.Service) (export *mcsv1beta1.ServiceExport, statusErr, err error) {
	export, err = c.caches.Exports.ServiceExports(svc.Namespace).Get(svc.Name)
	if apierrors.IsNotFound(err) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("get service export %s/%s from cache: %w", svc.Namespace, svc.Name, err)
	}
	valid, conds := exportConditions(svc)
	if valid && c.opts.Policy != nil {
		valid, conds = c.permitted(svc.Namespace, conds)
	}
	statusErr = c.caches.WriteExportStatus(ctx, export, conds)
	if !valid {
		return nil, statusErr, nil // not published as exported: the clusterset cannot serve it
	}
	return export, statusErr, nil
}

// workloadsOf returns the workloads the selector index says svc selects,
// as the caches hold them now.
func (c *Controller) workloadsOf(key selector.ServiceKey, svc *corev1.Service) ([]endpoints.Workload, error) {
	members := c.index.Members(key.Namespace, key.Name)
	workloads := make([]endpoints.Workload, 0, len(members))
	for _, m := range members {
		w, ok, err := c.member(m)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue // deleted since the index saw it; its event is on the way
		}
		if w.Kind == endpoints.KindExternalWorkload && w.Hostname != "" {
			// An external workload has no subdomain to name the Service
			// its hostname is for: it is for every Service selecting it.
			w.Subdomain = svc.Name
		}
		workloads = append(workloads, w)
	}
	return workloads, nil
}

func (c *Controller) published(key selector.ServiceKey, rev uint64, obs observation, span trace.Span) {
	latency := time.Since(obs.at)
	c.metrics.latency.Observe(latency.Seconds())
	span.SetAttributes(attribute.Int64("membership.revision", int64(rev)))
	c.logger.Debug("endpoint set published", "service", key.Namespace+"/"+key.Name, "revision", rev,
		"latency", latency.Round(time.Microsecond))
}

// member returns the cached state of a workload the index says a Service
// selects; ok is false when it is no longer cached.
func (c *Controller) member(m selector.WorkloadKey) (w endpoints.Workload, ok bool, err error) {
	switch endpoints.Kind(m.Kind) {
	case endpoints.KindPod:
		p, ok, err := c.caches.Pod(m.Namespace, m.Name)
		if !ok || err != nil {
			return w, false, err
		}
		return kube.PodWorkload(p, c.caches.Zone(p.Spec.NodeName)), true, nil
	case endpoints.KindExternalWorkload:
		ew, ok, err := c.caches.ExternalWorkload(m.Namespace, m.Name)
		if !ok || err != nil {
			return w, false, err
		}
		return kube.ExternalWorkload(ew), true, nil
	}
	return w, false, nil
}

// traceContext renders a span context as the propagator writes it into
// request headers (traceparent, tracestate).
func (c *Controller) traceContext(sc trace.SpanContext) map[string]string {
	if !sc.IsValid() {
		return nil
	}
	m := map[string]string{}
	c.opts.Propagator.Inject(trace.ContextWithSpanContext(context.Background(), sc), propagation.MapCarrier(m))
	if len(m) == 0 {
		return nil
	}
	return m
}

// nodeChanged queues the Services of a node's Pods when the node's zone
// changed, since the zone is part of their endpoints.
func (c *Controller) nodeChanged(old, node *corev1.Node) {
	var oldZone, newZone, name string
	if old != nil {
		oldZone, name = old.Labels[kube.ZoneLabel], old.Name
	}
	if node != nil {
		newZone, name = node.Labels[kube.ZoneLabel], node.Name
	}
	if oldZone == newZone {
		return
	}
	pods, err := c.caches.PodsOnNode(name)
	if err != nil {
		c.logger.Error("list pods of node from cache", "node", name, "error", err)
		return
	}
	seen := map[selector.ServiceKey]struct{}{}
	var keys []selector.ServiceKey
	for _, p := range pods {
		for _, k := range c.index.ServicesFor(selector.WorkloadKey{Namespace: p.Namespace, Kind: string(endpoints.KindPod), Name: p.Name}) {
			if _, dup := seen[k]; !dup {
				seen[k] = struct{}{}
				keys = append(keys, k)
			}
		}
	}
	c.observe("Node", "", name, keys)
}

// ServicesFor returns the Services that select a Pod or an external
// workload, sorted, or kube.ErrWorkloadNotFound when the workload is not
// cached.
func (c *Controller) ServicesFor(kind endpoints.Kind, namespace, name string) ([]selector.ServiceKey, error) {
	var ok bool
	var err error
	switch kind {
	case endpoints.KindPod:
		_, ok, err = c.caches.Pod(namespace, name)
	case endpoints.KindExternalWorkload:
		_, ok, err = c.caches.ExternalWorkload(namespace, name)
	}
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%s %s/%s: %w", kind, namespace, name, kube.ErrWorkloadNotFound)
	}
	return c.index.ServicesFor(selector.WorkloadKey{Namespace: namespace, Kind: string(kind), Name: name}), nil
}

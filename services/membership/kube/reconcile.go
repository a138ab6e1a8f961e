package kube

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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	membershipv1 "github.com/plexusnet/plexus/api/membership/v1"
	workloadv1alpha1 "github.com/plexusnet/plexus/api/workload/v1alpha1"
	"github.com/plexusnet/plexus/services/membership/endpoints"
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
	svc, err := c.services.Services(key.Namespace).Get(key.Name)
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
	set := endpoints.Compute(ServiceModel(svc), workloads, endpoints.WithClusterName(c.opts.ClusterName))
	value := ServiceEndpoints(svc, &set, export)
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
	if export, _ := c.exports.ServiceExports(key.Namespace).Get(key.Name); export != nil {
		_, conds := exportConditions(nil)
		if err := c.writeExportStatus(ctx, export, conds); err != nil {
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
	export, err = c.exports.ServiceExports(svc.Namespace).Get(svc.Name)
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
	statusErr = c.writeExportStatus(ctx, export, conds)
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
		p, err := c.pods.Pods(m.Namespace).Get(m.Name)
		if apierrors.IsNotFound(err) {
			return w, false, nil
		}
		if err != nil {
			return w, false, fmt.Errorf("get pod %s/%s from cache: %w", m.Namespace, m.Name, err)
		}
		return PodWorkload(p, c.zoneOf(p.Spec.NodeName)), true, nil
	case endpoints.KindExternalWorkload:
		obj, exists, err := c.workloadInf.GetIndexer().GetByKey(m.Namespace + "/" + m.Name)
		if err != nil {
			return w, false, fmt.Errorf("get external workload %s/%s from cache: %w", m.Namespace, m.Name, err)
		}
		ew, isEW := obj.(*workloadv1alpha1.ExternalWorkload)
		if !exists || !isEW {
			return w, false, nil
		}
		return ExternalWorkload(ew), true, nil
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

// zoneOf returns the zone label of a node, "" when the node or its label is
// unknown.
func (c *Controller) zoneOf(node string) string {
	if node == "" {
		return ""
	}
	n, err := c.nodes.Get(node)
	if err != nil {
		return ""
	}
	return n.Labels[ZoneLabel]
}

// nodeChanged queues the Services of a node's Pods when the node's zone
// changed, since the zone is part of their endpoints.
func (c *Controller) nodeChanged(old, node *corev1.Node) {
	var oldZone, newZone, name string
	if old != nil {
		oldZone, name = old.Labels[ZoneLabel], old.Name
	}
	if node != nil {
		newZone, name = node.Labels[ZoneLabel], node.Name
	}
	if oldZone == newZone {
		return
	}
	objs, err := c.podInf.GetIndexer().ByIndex(podNodeIndex, name)
	if err != nil {
		c.logger.Error("list pods of node from cache", "node", name, "error", err)
		return
	}
	seen := map[selector.ServiceKey]struct{}{}
	var keys []selector.ServiceKey
	for _, obj := range objs {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			continue
		}
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
// workload, sorted, or ErrWorkloadNotFound when the workload is not cached.
func (c *Controller) ServicesFor(kind endpoints.Kind, namespace, name string) ([]selector.ServiceKey, error) {
	switch kind {
	case endpoints.KindPod:
		if _, err := c.pods.Pods(namespace).Get(name); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("pod %s/%s: %w", namespace, name, ErrWorkloadNotFound)
			}
			return nil, fmt.Errorf("get pod %s/%s from cache: %w", namespace, name, err)
		}
	case endpoints.KindExternalWorkload:
		_, exists, err := c.workloadInf.GetIndexer().GetByKey(namespace + "/" + name)
		if err != nil {
			return nil, fmt.Errorf("get external workload %s/%s from cache: %w", namespace, name, err)
		}
		if !exists {
			return nil, fmt.Errorf("external workload %s/%s: %w", namespace, name, ErrWorkloadNotFound)
		}
	default:
		return nil, fmt.Errorf("kind %q: %w", kind, ErrWorkloadNotFound)
	}
	return c.index.ServicesFor(selector.WorkloadKey{Namespace: namespace, Kind: string(kind), Name: name}), nil
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

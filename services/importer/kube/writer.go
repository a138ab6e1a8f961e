package kube

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/plexusnet/plexus/services/importer/exports"
)

// Operations counted by the writes metric.
const (
	OpCreate       = "create"
	OpUpdate       = "update"
	OpUpdateStatus = "update_status"
	OpDelete       = "delete"
)

// Writer makes the importer's writes to the member cluster: every write is
// counted by kind and operation and recorded in the Tracker. Deletes carry
// the uid and resourceVersion of the object the caller judged, so an object
// that changed hands or content in between is never deleted.
type Writer struct {
	kube    kubernetes.Interface
	mcs     mcsclient.Interface
	tracker *Tracker
	writes  *prometheus.CounterVec
	errors  *prometheus.CounterVec
	// guard, when set, is asked before every write; an error refuses it.
	guard func() error
}

// Guard makes every write ask fn first and refuse when it returns an
// error: the leader's check that its lease is still its own, so a replica
// that was paused past its lease writes nothing before it notices.
func (w *Writer) Guard(fn func() error) { w.guard = fn }

// allowed runs the guard.
func (w *Writer) allowed(kind Kind, op string) error {
	if w.guard == nil {
		return nil
	}
	if err := w.guard(); err != nil {
		w.errors.WithLabelValues(string(kind), op).Inc()
		return fmt.Errorf("%s %s refused: %w", op, kind, err)
	}
	return nil
}

// NewWriter returns a Writer; its metrics are registered on reg.
func NewWriter(kube kubernetes.Interface, mcs mcsclient.Interface, tracker *Tracker, reg prometheus.Registerer) (*Writer, error) {
	w := &Writer{
		kube: kube, mcs: mcs, tracker: tracker,
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "plexus_importer_writes_total",
			Help: "Kubernetes API writes made by the importer, by kind and operation.",
		}, []string{"kind", "operation"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "plexus_importer_write_errors_total",
			Help: "Kubernetes API writes of the importer that failed, by kind and operation.",
		}, []string{"kind", "operation"}),
	}
	for _, c := range []prometheus.Collector{w.writes, w.errors} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register writer metrics: %w", err)
		}
	}
	return w, nil
}

func (w *Writer) count(kind Kind, op string, err error) {
	if err != nil {
		w.errors.WithLabelValues(string(kind), op).Inc()
		return
	}
	w.writes.WithLabelValues(string(kind), op).Inc()
}

func preconditions(obj metav1.Object) metav1.DeleteOptions {
	uid, rv := obj.GetUID(), obj.GetResourceVersion()
	return metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}}
}

// CreateSlice creates a slice (named by the API server from its
// generateName).
func (w *Writer) CreateSlice(ctx context.Context, owner exports.Key, s *discovery.EndpointSlice) (*discovery.EndpointSlice, error) {
	if err := w.allowed(KindEndpointSlice, OpCreate); err != nil {
		return nil, err
	}
	out, err := w.kube.DiscoveryV1().EndpointSlices(s.Namespace).Create(ctx, s, metav1.CreateOptions{})
	w.count(KindEndpointSlice, OpCreate, err)
	if err != nil {
		return nil, fmt.Errorf("create EndpointSlice %s/%s*: %w", s.Namespace, s.GenerateName, err)
	}
	w.tracker.Wrote(owner, KindEndpointSlice, out)
	return out, nil
}

// UpdateSlice replaces a slice; its resourceVersion guards the write.
func (w *Writer) UpdateSlice(ctx context.Context, owner exports.Key, s *discovery.EndpointSlice) (*discovery.EndpointSlice, error) {
	if err := w.allowed(KindEndpointSlice, OpUpdate); err != nil {
		return nil, err
	}
	out, err := w.kube.DiscoveryV1().EndpointSlices(s.Namespace).Update(ctx, s, metav1.UpdateOptions{})
	w.count(KindEndpointSlice, OpUpdate, err)
	if err != nil {
		return nil, fmt.Errorf("update EndpointSlice %s/%s: %w", s.Namespace, s.Name, err)
	}
	w.tracker.Wrote(owner, KindEndpointSlice, out)
	return out, nil
}

// DeleteSlice deletes a slice if it still is s (same uid and
// resourceVersion); a slice that is already gone counts as deleted.
func (w *Writer) DeleteSlice(ctx context.Context, owner exports.Key, s *discovery.EndpointSlice) error {
	if err := w.allowed(KindEndpointSlice, OpDelete); err != nil {
		return err
	}
	err := w.kube.DiscoveryV1().EndpointSlices(s.Namespace).Delete(ctx, s.Name, preconditions(s))
	if apierrors.IsNotFound(err) {
		err = nil
	}
	w.count(KindEndpointSlice, OpDelete, err)
	if err != nil {
		return fmt.Errorf("delete EndpointSlice %s/%s: %w", s.Namespace, s.Name, err)
	}
	w.tracker.Deleted(owner, KindEndpointSlice, s)
	return nil
}

// CreateImport creates a ServiceImport (its status is written separately).
func (w *Writer) CreateImport(ctx context.Context, owner exports.Key, si *mcsv1beta1.ServiceImport) (*mcsv1beta1.ServiceImport, error) {
	if err := w.allowed(KindServiceImport, OpCreate); err != nil {
		return nil, err
	}
	out, err := w.mcs.MulticlusterV1beta1().ServiceImports(si.Namespace).Create(ctx, si, metav1.CreateOptions{})
	w.count(KindServiceImport, OpCreate, err)
	if err != nil {
		return nil, fmt.Errorf("create ServiceImport %s/%s: %w", si.Namespace, si.Name, err)
	}
	w.tracker.Wrote(owner, KindServiceImport, out)
	return out, nil
}

// UpdateImport replaces a ServiceImport's metadata and spec.
func (w *Writer) UpdateImport(ctx context.Context, owner exports.Key, si *mcsv1beta1.ServiceImport) (*mcsv1beta1.ServiceImport, error) {
	if err := w.allowed(KindServiceImport, OpUpdate); err != nil {
		return nil, err
	}
	out, err := w.mcs.MulticlusterV1beta1().ServiceImports(si.Namespace).Update(ctx, si, metav1.UpdateOptions{})
	w.count(KindServiceImport, OpUpdate, err)
	if err != nil {
		return nil, fmt.Errorf("update ServiceImport %s/%s: %w", si.Namespace, si.Name, err)
	}
	w.tracker.Wrote(owner, KindServiceImport, out)
	return out, nil
}

// UpdateImportStatus replaces a ServiceImport's status.
func (w *Writer) UpdateImportStatus(ctx context.Context, owner exports.Key, si *mcsv1beta1.ServiceImport) (*mcsv1beta1.ServiceImport, error) {
	if err := w.allowed(KindServiceImport, OpUpdateStatus); err != nil {
		return nil, err
	}
	out, err := w.mcs.MulticlusterV1beta1().ServiceImports(si.Namespace).UpdateStatus(ctx, si, metav1.UpdateOptions{})
	w.count(KindServiceImport, OpUpdateStatus, err)
	if err != nil {
		return nil, fmt.Errorf("update status of ServiceImport %s/%s: %w", si.Namespace, si.Name, err)
	}
	w.tracker.Wrote(owner, KindServiceImport, out)
	return out, nil
}

// DeleteImport deletes a ServiceImport if it still is si.
func (w *Writer) DeleteImport(ctx context.Context, owner exports.Key, si *mcsv1beta1.ServiceImport) error {
	if err := w.allowed(KindServiceImport, OpDelete); err != nil {
		return err
	}
	err := w.mcs.MulticlusterV1beta1().ServiceImports(si.Namespace).Delete(ctx, si.Name, preconditions(si))
	if apierrors.IsNotFound(err) {
		err = nil
	}
	w.count(KindServiceImport, OpDelete, err)
	if err != nil {
		return fmt.Errorf("delete ServiceImport %s/%s: %w", si.Namespace, si.Name, err)
	}
	w.tracker.Deleted(owner, KindServiceImport, si)
	return nil
}

// UpdateExportStatus replaces the status of this cluster's ServiceExport
// (the importer writes its Conflict condition only); its resourceVersion
// guards the write.
func (w *Writer) UpdateExportStatus(ctx context.Context, owner exports.Key, se *mcsv1beta1.ServiceExport) (*mcsv1beta1.ServiceExport, error) {
	if err := w.allowed(KindServiceExport, OpUpdateStatus); err != nil {
		return nil, err
	}
	out, err := w.mcs.MulticlusterV1beta1().ServiceExports(se.Namespace).UpdateStatus(ctx, se, metav1.UpdateOptions{})
	w.count(KindServiceExport, OpUpdateStatus, err)
	if err != nil {
		return nil, fmt.Errorf("update status of ServiceExport %s/%s: %w", se.Namespace, se.Name, err)
	}
	w.tracker.Wrote(owner, KindServiceExport, out)
	return out, nil
}

// CreateService creates a derived Service.
func (w *Writer) CreateService(ctx context.Context, owner exports.Key, svc *corev1.Service) (*corev1.Service, error) {
	if err := w.allowed(KindService, OpCreate); err != nil {
		return nil, err
	}
	out, err := w.kube.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{})
	w.count(KindService, OpCreate, err)
	if err != nil {
		return nil, fmt.Errorf("create Service %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	w.tracker.Wrote(owner, KindService, out)
	return out, nil
}

// UpdateService replaces a derived Service.
func (w *Writer) UpdateService(ctx context.Context, owner exports.Key, svc *corev1.Service) (*corev1.Service, error) {
	if err := w.allowed(KindService, OpUpdate); err != nil {
		return nil, err
	}
	out, err := w.kube.CoreV1().Services(svc.Namespace).Update(ctx, svc, metav1.UpdateOptions{})
	w.count(KindService, OpUpdate, err)
	if err != nil {
		return nil, fmt.Errorf("update Service %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	w.tracker.Wrote(owner, KindService, out)
	return out, nil
}

// DeleteService deletes a derived Service if it still is svc.
func (w *Writer) DeleteService(ctx context.Context, owner exports.Key, svc *corev1.Service) error {
	if err := w.allowed(KindService, OpDelete); err != nil {
		return err
	}
	err := w.kube.CoreV1().Services(svc.Namespace).Delete(ctx, svc.Name, preconditions(svc))
	if apierrors.IsNotFound(err) {
		err = nil
	}
	w.count(KindService, OpDelete, err)
	if err != nil {
		return fmt.Errorf("delete Service %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	w.tracker.Deleted(owner, KindService, svc)
	return nil
}

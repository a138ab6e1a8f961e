package kube

import (
	"context"
	"errors"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/plexusnet/plexus/services/importer/exports"
	"github.com/plexusnet/plexus/services/importer/materialize"
	islices "github.com/plexusnet/plexus/services/importer/slices"
)

// ApplyPlan makes a slice plan's writes: creates and updates before
// deletes, so an endpoint moving between slices is never missing in
// between. It stops at the first write that fails and returns what was
// written before it.
func (w *Writer) ApplyPlan(ctx context.Context, owner exports.Key, plan islices.Plan) (materialize.Applied, error) {
	var a materialize.Applied
	for _, s := range plan.Create {
		out, err := w.CreateSlice(ctx, owner, s)
		if err != nil {
			return a, err
		}
		a.Created = append(a.Created, out)
	}
	for _, s := range plan.Update {
		out, err := w.UpdateSlice(ctx, owner, s)
		if err != nil {
			return a, err
		}
		a.Updated = append(a.Updated, out)
	}
	for _, s := range plan.Delete {
		if err := w.DeleteSlice(ctx, owner, s); err != nil {
			return a, err
		}
		a.Deleted = append(a.Deleted, s)
	}
	return a, nil
}

// ApplyImport creates the ServiceImport want (cur nil) or replaces cur's
// metadata and spec with want's.
func (w *Writer) ApplyImport(ctx context.Context, owner exports.Key, cur, want *mcsv1beta1.ServiceImport) (*mcsv1beta1.ServiceImport, error) {
	if cur == nil {
		return w.CreateImport(ctx, owner, want)
	}
	return w.UpdateImport(ctx, owner, want)
}

// ApplyDerived makes the derived Service's write op (see
// materialize.Derived) and returns the Service as written and the number of
// writes. When the API server refuses the clusterset VIPs as cluster IPs
// (outside its service ranges, or a family it does not serve), the Service
// is created with addresses of the cluster's own and the refusal is
// returned as note.
func (w *Writer) ApplyDerived(ctx context.Context, owner exports.Key, op materialize.DerivedOp, cur, want *corev1.Service) (out *corev1.Service, writes int, note, err error) {
	switch op {
	case materialize.DerivedNone:
		return want, 0, nil, nil
	case materialize.DerivedUpdate:
		out, err = w.UpdateService(ctx, owner, want)
		if err != nil {
			return nil, 0, nil, err
		}
		return out, 1, nil, nil
	case materialize.DerivedReplace:
		if err := w.DeleteService(ctx, owner, cur); err != nil {
			return nil, 0, nil, err
		}
		writes++
	}
	out, err = w.CreateService(ctx, owner, want)
	if err != nil && materialize.PinsVIPs(want) && ipRefused(err) {
		note = err
		out, err = w.CreateService(ctx, owner, materialize.WithoutVIPs(want))
	}
	if err != nil {
		return nil, writes, note, err
	}
	return out, writes + 1, note, nil
}

// ipRefused reports whether the API server refused a Service's requested
// cluster IPs or families (outside its service ranges, taken, or a family
// it does not serve).
func ipRefused(err error) bool {
	var st apierrors.APIStatus
	if !apierrors.IsInvalid(err) || !errors.As(err, &st) || st.Status().Details == nil {
		return false
	}
	for _, cause := range st.Status().Details.Causes {
		if strings.HasPrefix(cause.Field, "spec.clusterIP") || strings.HasPrefix(cause.Field, "spec.ipFamil") {
			return true
		}
	}
	return false
}

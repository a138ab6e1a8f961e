package kube

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/plexusnet/plexus/internal/mcsnames"
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
//
// Without fallback a refusal is returned as an error wrapping ErrVIPRefused
// instead, so the caller can first make the VIPs acceptable (EnsureServiceCIDRs).
func (w *Writer) ApplyDerived(ctx context.Context, owner exports.Key, op materialize.DerivedOp, cur, want *corev1.Service, fallback bool) (out *corev1.Service, writes int, note, err error) {
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
	if err != nil && materialize.PinsVIPs(want) && refused(err, "spec.clusterIP", "spec.ipFamil") {
		// A ServiceCIDR helps with a VIP outside the Service ranges, not
		// with a family the cluster does not serve.
		if !fallback && !refused(err, "spec.ipFamil") {
			return nil, writes, err, fmt.Errorf("%w: %w", ErrVIPRefused, err)
		}
		note = err
		out, err = w.CreateService(ctx, owner, materialize.WithoutVIPs(want))
	}
	if err != nil {
		return nil, writes, note, err
	}
	return out, writes + 1, note, nil
}

// ErrVIPRefused means the API server refused the clusterset VIPs as a
// Service's cluster IPs.
var ErrVIPRefused = errors.New("the API server refused the clusterset VIPs as cluster IPs")

// serviceCIDRName names the ServiceCIDR of one VIP CIDR.
func serviceCIDRName(cidr string) string {
	return "plexus-vips-" + strings.NewReplacer(".", "-", ":", "-", "/", "-").Replace(cidr)
}

// EnsureServiceCIDRs makes sure a ServiceCIDR (networking.k8s.io/v1) exists
// for each of cidrs, so that the API server accepts the clusterset VIPs as
// cluster IPs although they lie outside its --service-cluster-ip-range. It
// returns when the youngest of them was created: the API server's allocator
// takes a new one up a moment later.
func (w *Writer) EnsureServiceCIDRs(ctx context.Context, cidrs []string) (time.Time, error) {
	var youngest time.Time
	api := w.kube.NetworkingV1().ServiceCIDRs()
	for _, cidr := range cidrs {
		name := serviceCIDRName(cidr)
		cur, err := api.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			if err = w.allowed(KindServiceCIDR, OpCreate); err != nil {
				return youngest, err
			}
			cur, err = api.Create(ctx, &networkingv1.ServiceCIDR{
				ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelAppManagedBy: mcsnames.ManagedBy}},
				Spec:       networkingv1.ServiceCIDRSpec{CIDRs: []string{cidr}},
			}, metav1.CreateOptions{})
			w.count(KindServiceCIDR, OpCreate, err)
		}
		if err != nil {
			return youngest, fmt.Errorf("ServiceCIDR %s for %s: %w", name, cidr, err)
		}
		if t := cur.CreationTimestamp.Time; t.After(youngest) {
			youngest = t
		}
	}
	return youngest, nil
}

// refused reports whether the API server refused a Service for a field
// starting with one of prefixes: "spec.clusterIP" (cluster IPs outside its
// service ranges or taken), "spec.ipFamil" (a family it does not serve).
func refused(err error, prefixes ...string) bool {
	var st apierrors.APIStatus
	if !apierrors.IsInvalid(err) || !errors.As(err, &st) || st.Status().Details == nil {
		return false
	}
	for _, cause := range st.Status().Details.Causes {
		for _, p := range prefixes {
			if strings.HasPrefix(cause.Field, p) {
				return true
			}
		}
	}
	return false
}

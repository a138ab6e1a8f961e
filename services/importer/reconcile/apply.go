package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	membershipv1 "github.com/plexusnet/plexus/api/membership/v1"

	"github.com/plexusnet/plexus/services/importer/materialize"
	islices "github.com/plexusnet/plexus/services/importer/slices"
)

// writeSlices plans and writes every source cluster's slices. A cluster
// whose writes fail does not stop the others: its outcome says what failed,
// the slices it held before stay, and the status reports it. It returns
// the slices each cluster holds after the writes, and an error to retry
// when a failure may pass (a conflict, an unavailable API server); a write
// the API server refuses as invalid waits for the next change instead.
func (r *run) writeSlices(ctx context.Context, v materialize.View, o *materialize.Outcome, steer materialize.Steering) (map[string][]*discovery.EndpointSlice, error) {
	after := map[string][]*discovery.EndpointSlice{}
	var retry []error
	stamps := r.unchanged(&v, o.Derived, steer)
	planned := map[string]planStamp{}
	defer r.setLocal(func(l *local) { l.planned = planned })
	for _, cp := range materialize.PlanSlices(r.c.cfg.Packer, v, o.Derived, steer, r.authoritative) {
		cl, existing := cp.Cluster, v.Slices[cp.Cluster]
		after[cl] = existing
		if cp.Waiting {
			continue
		}
		co := materialize.ClusterOutcome{Skipped: cp.Skipped, Dropped: cp.Plan.Dropped, Exported: cp.Exported}
		r.noteDrops(cl, co.Dropped)
		if cp.Skipped != nil {
			r.handled[cl] = true
			r.noteProblem(cl, "endpoints of a cluster cannot be used; its slices are left as they are", cp.Skipped)
			o.Clusters[cl] = co
			continue
		}
		applied, err := r.c.cfg.Writer.ApplyPlan(ctx, r.key, cp.Plan)
		r.writes += len(applied.Created) + len(applied.Updated) + len(applied.Deleted)
		after[cl] = materialize.AfterWrites(existing, applied)
		switch {
		case err != nil:
			co.WriteErr = err
			r.c.metrics.clusterFailures.WithLabelValues(cl).Inc()
			if permanent(err) {
				r.handled[cl] = true
				r.noteProblem(cl, "the API server refused a cluster's slices; its last good slices stay until its next change", err)
			} else {
				retry = append(retry, err)
			}
		default:
			r.handled[cl] = true
			if !cp.Plan.Empty() {
				r.observe(cl)
			} else if st, ok := stamps[cl]; ok && len(co.Dropped) == 0 {
				planned[cl] = st
			}
		}
		o.Clusters[cl] = co
	}
	return after, errors.Join(retry...)
}

// planStamp is what a cluster's slices of a service were planned from.
type planStamp struct {
	// export is the cluster's endpoint set as the store holds it: a new
	// message for every change, never one changed in place.
	export *membershipv1.ServiceEndpoints
	// derived is the derived Service the slices belong to.
	derived types.UID
	// slices names the cluster's slices and their resourceVersions.
	slices string
	// ports are the derived Service's ports.
	ports string
	// hints are the local zones local first hints for (none: off).
	hints string
	// ranges are the cluster's declared address ranges.
	ranges string
}

// portsStamp names ports by name, protocol and number.
func portsStamp(ports []corev1.ServicePort) string {
	var b strings.Builder
	for _, p := range ports {
		fmt.Fprintf(&b, "%s/%s/%d,", p.Name, p.Protocol, p.Port)
	}
	return b.String()
}

// unchanged marks in v the clusters planned before from the same inputs
// with nothing to write, which need no planning now, and converts the
// endpoints of the others for the packer. It returns every exporting
// cluster's inputs, to remember those whose plan is empty again.
func (r *run) unchanged(v *materialize.View, derived *corev1.Service, steer materialize.Steering) map[string]planStamp {
	var before map[string]planStamp
	r.setLocal(func(l *local) { before = l.planned })
	stamps := make(map[string]planStamp, len(v.Exports))
	v.Unchanged = map[string]bool{}
	for i, e := range v.Exports {
		raw, ok := r.exports[e.Cluster]
		if !ok {
			continue
		}
		st := planStamp{export: raw.Endpoints, slices: sliceStamp(v.Slices[e.Cluster]), hints: strings.Join(steer.Zones, ","), ranges: fmt.Sprint(raw.Ranges)}
		if derived != nil {
			// The derived Service's ports decide which of the cluster's
			// ports its slices carry.
			st.derived, st.ports = derived.UID, portsStamp(derived.Spec.Ports)
		}
		stamps[e.Cluster] = st
		if prev, ok := before[e.Cluster]; ok && prev == st {
			v.Unchanged[e.Cluster] = true
			continue
		}
		v.Exports[i] = raw.Core()
	}
	if n := len(v.Unchanged); n > 0 {
		r.c.metrics.plansSkipped.Add(float64(n))
	}
	return stamps
}

// sliceStamp names slices and their resourceVersions, in name order.
func sliceStamp(ss []*discovery.EndpointSlice) string {
	parts := make([]string, len(ss))
	for i, s := range ss {
		parts[i] = s.Name + "@" + s.ResourceVersion
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// permanent reports whether the API server refused a write for its
// content, so that writing it again cannot succeed.
func permanent(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsRequestEntityTooLargeError(err)
}

// noteDrops counts and logs the endpoints a cluster's plan left out, once
// per change of what is left out: the same drops on every reconcile are
// one problem, not many.
func (r *run) noteDrops(cluster string, dropped []islices.Dropped) {
	var before []islices.Dropped
	r.setLocal(func(l *local) {
		if l.outcome != nil {
			before = l.outcome.Clusters[cluster].Dropped
		}
	})
	if sameDrops(before, dropped) || len(dropped) == 0 {
		return
	}
	for _, d := range dropped {
		r.c.metrics.dropped.WithLabelValues(dropReason(d.Err)).Inc()
	}
	r.c.logger.Warn("endpoints left out: the API server would refuse them, or they lie outside their cluster's ranges", "service", r.key, "cluster", cluster,
		"dropped", len(dropped), "first", dropped[0].Addresses, "reason", dropped[0].Err)
}

func sameDrops(a, b []islices.Dropped) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Group != b[i].Group || a[i].Endpoint != b[i].Endpoint || a[i].Err.Error() != b[i].Err.Error() {
			return false
		}
	}
	return true
}

// dropReason is the metric label of a dropped endpoint's reason.
func dropReason(err error) string {
	switch {
	case errors.Is(err, islices.ErrDuplicateEndpoint):
		return "duplicate"
	case errors.Is(err, islices.ErrNoAddresses):
		return "no_addresses"
	case errors.Is(err, materialize.ErrOutOfRange):
		return "out_of_range"
	}
	return "invalid"
}

// noteProblem logs a cluster's problem once per change of it.
func (r *run) noteProblem(cluster, msg string, err error) {
	var before string
	r.setLocal(func(l *local) {
		if l.outcome != nil {
			co := l.outcome.Clusters[cluster]
			before = errorText(co.Skipped) + errorText(co.WriteErr)
		}
	})
	if before == err.Error() {
		r.c.logger.Debug(msg, "service", r.key, "cluster", cluster, "error", err)
		return
	}
	r.c.logger.Warn(msg, "service", r.key, "cluster", cluster, "error", err)
}

func errorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

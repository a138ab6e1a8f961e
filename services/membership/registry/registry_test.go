package registry

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	workloadv1alpha1 "github.com/plexusnet/plexus/api/workload/v1alpha1"
	"github.com/plexusnet/plexus/internal/apierr"
)

func withReady(st metav1.ConditionStatus, reason string) *workloadv1alpha1.ExternalWorkload {
	return &workloadv1alpha1.ExternalWorkload{Status: workloadv1alpha1.ExternalWorkloadStatus{Conditions: []metav1.Condition{
		{Type: workloadv1alpha1.ConditionReady, Status: st, Reason: reason},
	}}}
}

func TestReportedReady(t *testing.T) {
	tests := []struct {
		name string
		ew   *workloadv1alpha1.ExternalWorkload
		want bool
	}{
		{"no condition yet", &workloadv1alpha1.ExternalWorkload{}, false},
		{"reported ready", withReady(metav1.ConditionTrue, workloadv1alpha1.ReasonReported), true},
		{"reported not ready", withReady(metav1.ConditionFalse, workloadv1alpha1.ReasonReported), false},
		{"expired after reporting ready", withReady(metav1.ConditionFalse, workloadv1alpha1.ReasonHeartbeatExpired), true},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, ReportedReady(tc.ew), tc.name)
	}
}

func TestReportCoalescesFreshHeartbeats(t *testing.T) {
	now := time.Unix(1000, 0)
	r := &Registry{now: func() time.Time { return now }}
	w := &workloadv1alpha1.ExternalWorkload{Spec: workloadv1alpha1.ExternalWorkloadSpec{TTLSeconds: 5}}

	require.True(t, r.report(w, true), "the first report writes")
	require.True(t, meta.IsStatusConditionTrue(w.Status.Conditions, workloadv1alpha1.ConditionReady))
	require.True(t, w.Status.LastHeartbeatTime.Time.Equal(now))

	now = now.Add(100 * time.Millisecond)
	require.False(t, r.report(w, true), "a heartbeat 100ms after the last, with a 5s TTL, is not written")

	now = now.Add(400 * time.Millisecond)
	require.True(t, r.report(w, true), "half a second later (a tenth of the TTL) it is")
	require.True(t, w.Status.LastHeartbeatTime.Time.Equal(now))

	now = now.Add(time.Millisecond)
	require.True(t, r.report(w, false), "a change of readiness is always written")
	c := meta.FindStatusCondition(w.Status.Conditions, workloadv1alpha1.ConditionReady)
	require.Equal(t, metav1.ConditionFalse, c.Status)
	require.Equal(t, workloadv1alpha1.ReasonReported, c.Reason)
	require.True(t, c.LastTransitionTime.Time.Equal(now))
}

func TestDesiredFillsDefaults(t *testing.T) {
	w := desired(Registration{Namespace: "ns", Name: "vm", Pool: "pools/ext"})
	require.Equal(t, int32(workloadv1alpha1.DefaultTTLSeconds), w.Spec.TTLSeconds)
	require.Equal(t, "pools/ext", w.Spec.Pool)
	w = desired(Registration{Namespace: "ns", Name: "vm", TTL: 2 * time.Second})
	require.Equal(t, int32(2), w.Spec.TTLSeconds)
}

func TestErrorMapping(t *testing.T) {
	gr := schema.GroupResource{Group: workloadv1alpha1.GroupName, Resource: workloadv1alpha1.ResourceExternalWorkloads}
	require.ErrorIs(t, kubeError("get", apierrors.NewNotFound(gr, "vm")), ErrNotFound)
	require.ErrorIs(t, kubeError("create", apierrors.NewInvalid(workloadv1alpha1.ExternalWorkloadKind.GroupKind(), "vm", nil)), ErrInvalid)
	require.ErrorIs(t, kubeError("update", apierrors.NewConflict(gr, "vm", errors.New("changed"))), ErrConflict)
	other := apierrors.NewInternalError(errors.New("boom"))
	require.ErrorIs(t, kubeError("get", other), other)

	require.ErrorIs(t, allocatorError("allocate", apierr.New(codes.NotFound, "POOL_NOT_FOUND", "no pool", nil)), ErrPoolNotFound)
	require.ErrorIs(t, allocatorError("allocate", status.Error(codes.Unavailable, "connection refused")), ErrAllocatorUnavailable)
	exhausted := allocatorError("allocate", apierr.New(codes.ResourceExhausted, "POOL_EXHAUSTED", "full", nil))
	require.Equal(t, codes.ResourceExhausted, status.Code(exhausted), "other allocator errors keep their status")
	require.Equal(t, "POOL_EXHAUSTED", apierr.Reason(exhausted))
}

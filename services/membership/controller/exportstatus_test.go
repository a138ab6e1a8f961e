package controller

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// An export is valid when its Service exists and is not ExternalName, and
// ready as soon as it is valid; otherwise both conditions are False with
// the KEP's reasons.
func TestExportConditions(t *testing.T) {
	for _, c := range []struct {
		name        string
		svc         *corev1.Service
		valid       bool
		validReason mcsv1beta1.ServiceExportConditionReason
		readyReason mcsv1beta1.ServiceExportConditionReason
	}{
		{"no service", nil, false, mcsv1beta1.ServiceExportReasonNoService, mcsv1beta1.ServiceExportReasonFailed},
		{"external name", &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName}}, false,
			mcsv1beta1.ServiceExportReasonInvalidServiceType, mcsv1beta1.ServiceExportReasonFailed},
		{"cluster ip", &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP}}, true,
			mcsv1beta1.ServiceExportReasonValid, mcsv1beta1.ServiceExportReasonExported},
		{"headless", &corev1.Service{Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone}}, true,
			mcsv1beta1.ServiceExportReasonValid, mcsv1beta1.ServiceExportReasonExported},
	} {
		t.Run(c.name, func(t *testing.T) {
			valid, conds := exportConditions(c.svc)
			if valid != c.valid || len(conds) != 2 {
				t.Fatalf("valid %v with %d conditions, want %v with 2", valid, len(conds), c.valid)
			}
			status := metav1.ConditionFalse
			if c.valid {
				status = metav1.ConditionTrue
			}
			for i, want := range []struct {
				typ    mcsv1beta1.ServiceExportConditionType
				reason mcsv1beta1.ServiceExportConditionReason
			}{{mcsv1beta1.ServiceExportConditionValid, c.validReason}, {mcsv1beta1.ServiceExportConditionReady, c.readyReason}} {
				got := conds[i]
				if got.Type != string(want.typ) || got.Status != status || got.Reason != string(want.reason) || got.Message == "" {
					t.Errorf("condition %d = %+v, want %s=%s (%s) with a message", i, got, want.typ, status, want.reason)
				}
			}
		})
	}
}

package controller

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// exportConditions returns the Valid and Ready conditions of a ServiceExport
// of svc (nil: no such Service), as the cluster that exports it knows them
// (KEP-1645): an export is valid when its Service exists and is not of type
// ExternalName, which the clusterset cannot serve; a valid export is ready
// once membership publishes it, which it does at once. The Conflict
// condition is the importers' to write.
func exportConditions(svc *corev1.Service) (valid bool, conds []metav1.Condition) {
	cond := func(t mcsv1beta1.ServiceExportConditionType, ok bool, reason mcsv1beta1.ServiceExportConditionReason, msg string) metav1.Condition {
		st := metav1.ConditionFalse
		if ok {
			st = metav1.ConditionTrue
		}
		return metav1.Condition{Type: string(t), Status: st, Reason: string(reason), Message: msg}
	}
	var why mcsv1beta1.ServiceExportConditionReason
	var msg string
	switch {
	case svc == nil:
		why, msg = mcsv1beta1.ServiceExportReasonNoService, "no Service of this name exists in the namespace"
	case svc.Spec.Type == corev1.ServiceTypeExternalName:
		why, msg = mcsv1beta1.ServiceExportReasonInvalidServiceType, "a Service of type ExternalName cannot be exported to the clusterset"
	default:
		return true, []metav1.Condition{
			cond(mcsv1beta1.ServiceExportConditionValid, true, mcsv1beta1.ServiceExportReasonValid, "the Service can be exported"),
			cond(mcsv1beta1.ServiceExportConditionReady, true, mcsv1beta1.ServiceExportReasonExported, "the endpoints are published to the clusterset"),
		}
	}
	return false, []metav1.Condition{
		cond(mcsv1beta1.ServiceExportConditionValid, false, why, msg),
		cond(mcsv1beta1.ServiceExportConditionReady, false, mcsv1beta1.ServiceExportReasonFailed, "not exported: "+msg),
	}
}

// permitted asks the clusterset policy whether the cluster may export the
// services of namespace; a refusal turns the export's conditions into
// Valid=False (reason ExportNotPermitted, the message naming the rule) and
// Ready=False.
func (c *Controller) permitted(namespace string, conds []metav1.Condition) (bool, []metav1.Condition) {
	d := c.opts.Policy.Current().MayExport(namespace, c.opts.ClusterName)
	if d.Allowed {
		return true, conds
	}
	return false, []metav1.Condition{
		{Type: string(mcsv1beta1.ServiceExportConditionValid), Status: metav1.ConditionFalse, Reason: d.Reason, Message: d.Message},
		{Type: string(mcsv1beta1.ServiceExportConditionReady), Status: metav1.ConditionFalse,
			Reason: string(mcsv1beta1.ServiceExportReasonFailed), Message: "not exported: " + d.Message},
	}
}

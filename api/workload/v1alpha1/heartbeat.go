package v1alpha1

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
)

// TTL returns the heartbeat TTL, falling back to DefaultTTLSeconds for an
// object that was built in Go and never went through the API server's
// defaulting.
func (w *ExternalWorkload) TTL() time.Duration {
	if w.Spec.TTLSeconds <= 0 {
		return DefaultTTLSeconds * time.Second
	}
	return time.Duration(w.Spec.TTLSeconds) * time.Second
}

// HeartbeatExpiry returns the moment the workload stops counting as alive:
// its last heartbeat plus the TTL. Before the first heartbeat the creation
// time stands in, so a workload that registers and never heartbeats expires
// like one that stopped.
func (w *ExternalWorkload) HeartbeatExpiry() time.Time {
	last := w.CreationTimestamp.Time
	if hb := w.Status.LastHeartbeatTime; hb != nil && hb.After(last) {
		last = hb.Time
	}
	return last.Add(w.TTL())
}

// IsReady reports whether the workload should receive traffic at now: its
// Ready condition is True and its heartbeat has not expired.
func (w *ExternalWorkload) IsReady(now time.Time) bool {
	if !meta.IsStatusConditionTrue(w.Status.Conditions, ConditionReady) {
		return false
	}
	return now.Before(w.HeartbeatExpiry())
}

package v1alpha1

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestIsReady(t *testing.T) {
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ready := []metav1.Condition{{Type: ConditionReady, Status: metav1.ConditionTrue, Reason: ReasonReported}}
	notReady := []metav1.Condition{{Type: ConditionReady, Status: metav1.ConditionFalse, Reason: ReasonReported}}
	at := func(d time.Duration) *metav1.MicroTime { m := metav1.NewMicroTime(created.Add(d)); return &m }

	tests := []struct {
		name       string
		ttl        int32
		heartbeat  *metav1.MicroTime
		conditions []metav1.Condition
		now        time.Duration // after creation
		want       bool
		wantExpiry time.Duration // after creation
	}{
		{name: "fresh heartbeat", ttl: 10, heartbeat: at(time.Minute), conditions: ready, now: time.Minute + 9*time.Second, want: true, wantExpiry: time.Minute + 10*time.Second},
		{name: "expired heartbeat", ttl: 10, heartbeat: at(time.Minute), conditions: ready, now: time.Minute + 10*time.Second, want: false, wantExpiry: time.Minute + 10*time.Second},
		{name: "sub-second ttl edge", ttl: 1, heartbeat: at(1500 * time.Millisecond), conditions: ready, now: 2400 * time.Millisecond, want: true, wantExpiry: 2500 * time.Millisecond},
		{name: "never heartbeated counts from creation", ttl: 10, conditions: ready, now: 5 * time.Second, want: true, wantExpiry: 10 * time.Second},
		{name: "never heartbeated and old", ttl: 10, conditions: ready, now: 11 * time.Second, want: false, wantExpiry: 10 * time.Second},
		{name: "default ttl when unset", heartbeat: at(0), conditions: ready, now: 29 * time.Second, want: true, wantExpiry: DefaultTTLSeconds * time.Second},
		{name: "reported not ready", ttl: 10, heartbeat: at(0), conditions: notReady, now: time.Second, want: false, wantExpiry: 10 * time.Second},
		{name: "no condition", ttl: 10, heartbeat: at(0), now: time.Second, want: false, wantExpiry: 10 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := &ExternalWorkload{
				ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)},
				Spec:       ExternalWorkloadSpec{TTLSeconds: tc.ttl},
				Status:     ExternalWorkloadStatus{LastHeartbeatTime: tc.heartbeat, Conditions: tc.conditions},
			}
			require.Equal(t, created.Add(tc.wantExpiry), w.HeartbeatExpiry())
			require.Equal(t, tc.want, w.IsReady(created.Add(tc.now)))
		})
	}
}

func TestDeepCopyIsIndependent(t *testing.T) {
	hb := metav1.NewMicroTime(time.Now())
	w := &ExternalWorkload{
		Spec:   ExternalWorkloadSpec{WorkloadIPs: []string{"192.0.2.1"}, Ports: []WorkloadPort{{Name: "http", Port: 80}}},
		Status: ExternalWorkloadStatus{LastHeartbeatTime: &hb, Conditions: []metav1.Condition{{Type: ConditionReady}}},
	}
	c := w.DeepCopy()
	c.Spec.WorkloadIPs[0] = "192.0.2.2"
	c.Spec.Ports[0].Port = 81
	c.Status.Conditions[0].Type = "Other"
	c.Status.LastHeartbeatTime.Time = time.Time{}
	require.Equal(t, "192.0.2.1", w.Spec.WorkloadIPs[0])
	require.Equal(t, int32(80), w.Spec.Ports[0].Port)
	require.Equal(t, ConditionReady, w.Status.Conditions[0].Type)
	require.False(t, w.Status.LastHeartbeatTime.IsZero())
}

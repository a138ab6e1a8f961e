package kubetest

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// podStatus is the status a kubelet would write for p in state: Running
// while a container runs or is to start again, Succeeded or Failed once
// none will; Ready when every container is. Times of conditions whose
// status did not change are kept, so an unchanged Pod is not rewritten.
func podStatus(p *corev1.Pod, state PodState, hostIP string, now time.Time) corev1.PodStatus {
	cur := p.Status
	// What the runner does not write (QOS class, fields of newer API
	// versions) stays as it is.
	st := *cur.DeepCopy()
	st.Phase, st.PodIPs, st.ContainerStatuses, st.Conditions = corev1.PodRunning, nil, nil, nil
	st.HostIP, st.HostIPs = hostIP, []corev1.HostIP{{IP: hostIP}}
	for _, ip := range state.IPs {
		st.PodIPs = append(st.PodIPs, corev1.PodIP{IP: ip})
	}
	st.PodIP = ""
	if len(state.IPs) > 0 {
		st.PodIP = state.IPs[0]
	}
	if st.StartTime == nil {
		t := metav1.NewTime(now)
		st.StartTime = &t
	}
	ready, live, failed := len(state.Containers) > 0, false, false
	for _, c := range state.Containers {
		cs := corev1.ContainerStatus{Name: c.Name, Ready: c.Ready, RestartCount: c.Restarts, Started: ptr(c.Running)}
		for _, spec := range p.Spec.Containers {
			if spec.Name == c.Name {
				cs.Image = spec.Image
			}
		}
		switch {
		case c.Running:
			cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(c.StartedAt)}
			live = true
		case c.Waiting != "":
			cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: c.Waiting, Message: c.Message}
			live = true
		default:
			cs.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: c.ExitCode, Reason: terminatedReason(c.ExitCode),
				StartedAt: metav1.NewTime(c.StartedAt), FinishedAt: metav1.NewTime(c.FinishedAt)}
			failed = failed || c.ExitCode != 0
		}
		if !c.FinishedAt.IsZero() && (c.Running || c.Waiting != "") {
			cs.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: c.ExitCode, Reason: terminatedReason(c.ExitCode),
				StartedAt: metav1.NewTime(c.StartedAt), FinishedAt: metav1.NewTime(c.FinishedAt)}
		}
		ready = ready && c.Ready
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
	}
	switch {
	case live:
	case failed:
		st.Phase, ready = corev1.PodFailed, false
	default:
		st.Phase, ready = corev1.PodSucceeded, false
	}
	for _, t := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		status := corev1.ConditionTrue
		if (t == corev1.ContainersReady || t == corev1.PodReady) && !ready {
			status = corev1.ConditionFalse
		}
		cond := corev1.PodCondition{Type: t, Status: status, LastTransitionTime: metav1.NewTime(now)}
		for _, old := range cur.Conditions {
			if old.Type == t && old.Status == status {
				cond.LastTransitionTime = old.LastTransitionTime
			}
		}
		st.Conditions = append(st.Conditions, cond)
	}
	return st
}

func terminatedReason(code int32) string {
	if code == 0 {
		return "Completed"
	}
	return "Error"
}

// statusEqual compares what podStatus writes, to the second (the API
// keeps times to the second).
func statusEqual(a, b corev1.PodStatus) bool {
	return equality.Semantic.DeepEqual(truncate(a), truncate(b))
}

func truncate(s corev1.PodStatus) corev1.PodStatus {
	s = *s.DeepCopy()
	sec := func(t *metav1.Time) {
		if t != nil {
			t.Time = t.Time.Truncate(time.Second).UTC()
		}
	}
	sec(s.StartTime)
	for i := range s.Conditions {
		sec(&s.Conditions[i].LastTransitionTime)
		s.Conditions[i].LastProbeTime = metav1.Time{}
	}
	for i := range s.ContainerStatuses {
		cs := &s.ContainerStatuses[i]
		cs.ImageID, cs.ContainerID = "", ""
		for _, st := range []*corev1.ContainerState{&cs.State, &cs.LastTerminationState} {
			if st.Running != nil {
				sec(&st.Running.StartedAt)
			}
			if st.Terminated != nil {
				sec(&st.Terminated.StartedAt)
				sec(&st.Terminated.FinishedAt)
			}
		}
	}
	return s
}

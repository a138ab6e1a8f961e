package kube

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	membershipv1 "github.com/plexusnet/plexus/api/membership/v1"
	workloadv1alpha1 "github.com/plexusnet/plexus/api/workload/v1alpha1"
	"github.com/plexusnet/plexus/services/membership/endpoints"
)

func richPod() *corev1.Pod {
	always := corev1.ContainerRestartPolicyAlways
	now := metav1.Now()
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "web-0", Namespace: "shop", UID: "u1", ResourceVersion: "7",
			Labels:            map[string]string{"app": "web"},
			Annotations:       map[string]string{"big": "annotation"},
			DeletionTimestamp: &now,
			ManagedFields:     []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
		},
		Spec: corev1.PodSpec{
			NodeName: "node-1", Hostname: "web-0", Subdomain: "web",
			InitContainers: []corev1.Container{
				{Name: "setup", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 1}}},
				{Name: "proxy", RestartPolicy: &always, Ports: []corev1.ContainerPort{{Name: "admin", ContainerPort: 9901}}},
			},
			Containers: []corev1.Container{
				{Name: "app", Image: "app:1", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}},
				{Name: "metrics", Ports: []corev1.ContainerPort{{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP}}},
			},
		},
		Status: corev1.PodStatus{
			Phase:  corev1.PodRunning,
			PodIP:  "10.0.0.5",
			PodIPs: []corev1.PodIP{{IP: "10.0.0.5"}, {IP: "fd00::5"}},
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
				{Type: corev1.PodReady, Status: corev1.ConditionTrue},
			},
		},
	}
}

func TestPodWorkload(t *testing.T) {
	w := PodWorkload(richPod(), "zone-a")
	require.Equal(t, endpoints.Workload{
		Kind: endpoints.KindPod, Namespace: "shop", Name: "web-0", UID: "u1",
		Addresses: []string{"10.0.0.5", "fd00::5"},
		Ports: []endpoints.ContainerPort{
			{Name: "http", Port: 8080},
			{Name: "dns", Port: 53, Protocol: "UDP"},
			{Name: "admin", Port: 9901},
		},
		Phase: endpoints.PhaseRunning, Ready: true, Terminating: true,
		Zone: "zone-a", NodeName: "node-1", Hostname: "web-0", Subdomain: "web",
	}, w, "containers first, then sidecars; init containers that do not keep running are left out")

	p := richPod()
	p.Status.PodIPs = nil
	p.Status.Conditions = nil
	w = PodWorkload(p, "")
	require.Equal(t, []string{"10.0.0.5"}, w.Addresses, "podIP stands in for podIPs")
	require.False(t, w.Ready)
}

func TestTrimKeepsWhatEndpointsRead(t *testing.T) {
	p := richPod()
	trimmed, err := trim(p.DeepCopy())
	require.NoError(t, err)
	tp := trimmed.(*corev1.Pod)
	require.Equal(t, PodWorkload(p, "z"), PodWorkload(tp, "z"))
	require.Equal(t, p.Labels, tp.Labels)
	require.Equal(t, p.ResourceVersion, tp.ResourceVersion)
	require.Empty(t, tp.Annotations)
	require.Empty(t, tp.ManagedFields)
	require.Empty(t, tp.Spec.Containers[0].Image)

	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "x"}}}}
	out, err := trim(svc)
	require.NoError(t, err)
	require.Empty(t, out.(*corev1.Service).ManagedFields)
}

func TestExternalWorkload(t *testing.T) {
	ew := &workloadv1alpha1.ExternalWorkload{
		ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: "shop", UID: "u2"},
		Spec: workloadv1alpha1.ExternalWorkloadSpec{
			WorkloadIPs: []string{"192.0.2.1"},
			Ports:       []workloadv1alpha1.WorkloadPort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
			Zone:        "z", Node: "host", Hostname: "vm",
		},
		Status: workloadv1alpha1.ExternalWorkloadStatus{Conditions: []metav1.Condition{
			{Type: workloadv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: workloadv1alpha1.ReasonHeartbeatExpired},
		}},
	}
	w := ExternalWorkload(ew)
	require.Equal(t, endpoints.KindExternalWorkload, w.Kind)
	require.False(t, w.Ready, "readiness is the stored condition")
	require.Equal(t, []endpoints.ContainerPort{{Name: "http", Port: 80, Protocol: "TCP"}}, w.Ports)
	require.Equal(t, "host", w.NodeName)
}

func TestServiceModelAndEndpoints(t *testing.T) {
	h2c := "kubernetes.io/h2c"
	timeout := int32(60)
	created := metav1.NewTime(time.Unix(1700000000, 0))
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", UID: "s1"},
		Spec: corev1.ServiceSpec{
			ClusterIP:                corev1.ClusterIPNone,
			PublishNotReadyAddresses: true,
			IPFamilies:               []corev1.IPFamily{corev1.IPv6Protocol},
			SessionAffinity:          corev1.ServiceAffinityClientIP,
			SessionAffinityConfig:    &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &timeout}},
			Ports: []corev1.ServicePort{
				{Name: "http", Port: 80, TargetPort: intstr.FromString("http"), AppProtocol: &h2c},
				{Name: "metrics", Port: 9090, TargetPort: intstr.FromInt32(9091), Protocol: corev1.ProtocolTCP},
				{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP},
			},
		},
	}
	m := ServiceModel(svc)
	require.Equal(t, endpoints.Service{
		Namespace: "shop", Name: "web", PublishNotReadyAddresses: true,
		AddressTypes: []endpoints.AddressType{endpoints.AddressTypeIPv6},
		Ports: []endpoints.ServicePort{
			{Name: "http", Port: 80, TargetPort: endpoints.TargetPortName("http"), AppProtocol: h2c},
			{Name: "metrics", Port: 9090, TargetPort: endpoints.TargetPortNumber(9091), Protocol: "TCP"},
			{Name: "dns", Port: 53, Protocol: "UDP"},
		},
	}, m)

	set := endpoints.Compute(m, []endpoints.Workload{PodWorkload(richPod(), "z")}, endpoints.WithClusterName("c1"))
	export := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: created}}
	out := ServiceEndpoints(svc, &set, export)
	require.Equal(t, ServiceName("shop", "web"), out.GetService())
	require.Equal(t, "namespaces/shop/services/web", out.GetService())
	require.Equal(t, "c1", out.GetCluster())
	require.Equal(t, "s1", out.GetUid())
	require.Len(t, out.GetPorts(), 3)
	require.Equal(t, membershipv1.Protocol_PROTOCOL_UDP, out.GetPorts()[2].GetProtocol())
	require.Len(t, out.GetGroups(), 1)
	g := out.GetGroups()[0]
	require.Equal(t, membershipv1.AddressType_ADDRESS_TYPE_IPV6, g.GetAddressType())
	require.Equal(t, []string{"fd00::5"}, g.GetEndpoints()[0].GetAddresses())
	ep := g.GetEndpoints()[0]
	require.True(t, ep.GetConditions().GetReady(), "published not-ready addresses")
	require.True(t, ep.GetConditions().GetTerminating())
	require.Equal(t, "web-0", ep.GetHostname())
	require.Equal(t, "Pod", ep.GetTargetRef().GetKind())
	var ports []int32
	for _, p := range g.GetPorts() {
		ports = append(ports, p.GetPort())
	}
	require.Equal(t, []int32{8080, 9091, 53}, ports)
	require.Equal(t, h2c, g.GetPorts()[0].GetAppProtocol())

	info := out.GetExport()
	require.True(t, info.GetExported())
	require.True(t, created.Time.Equal(info.GetExportCreateTime().AsTime()))
	require.Equal(t, membershipv1.ServiceType_SERVICE_TYPE_HEADLESS, info.GetType())
	require.Equal(t, membershipv1.SessionAffinity_SESSION_AFFINITY_CLIENT_IP, info.GetSessionAffinity())
	require.Equal(t, time.Minute, info.GetSessionAffinityTimeout().AsDuration())
	require.Equal(t, []membershipv1.AddressType{membershipv1.AddressType_ADDRESS_TYPE_IPV6}, info.GetIpFamilies())

	svc.Spec.ClusterIP = "10.96.0.10"
	svc.Spec.SessionAffinityConfig = nil
	info = ServiceEndpoints(svc, &set, nil).GetExport()
	require.False(t, info.GetExported())
	require.Nil(t, info.GetExportCreateTime())
	require.Equal(t, membershipv1.ServiceType_SERVICE_TYPE_CLUSTER_SET_IP, info.GetType())
	require.Equal(t, 3*time.Hour, info.GetSessionAffinityTimeout().AsDuration(), "the Kubernetes default")

	// Traffic fields come from the Service, exported labels and
	// annotations from the ServiceExport.
	local, closeBy := corev1.ServiceInternalTrafficPolicyLocal, "PreferClose"
	svc.Spec.InternalTrafficPolicy, svc.Spec.TrafficDistribution = &local, &closeBy
	export.Spec.ExportedLabels = map[string]string{"tier": "web"}
	export.Spec.ExportedAnnotations = map[string]string{"owner": "a"}
	info = ServiceEndpoints(svc, &set, export).GetExport()
	require.Equal(t, "Local", info.GetInternalTrafficPolicy())
	require.Equal(t, "PreferClose", info.GetTrafficDistribution())
	require.Equal(t, map[string]string{"tier": "web"}, info.GetExportedLabels())
	require.Equal(t, map[string]string{"owner": "a"}, info.GetExportedAnnotations())
}

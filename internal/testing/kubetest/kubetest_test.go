package kubetest_test

import (
	"context"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	workloadv1alpha1 "github.com/plexusnet/plexus/api/workload/v1alpha1"
	workloadclient "github.com/plexusnet/plexus/api/workload/v1alpha1/client"
	"github.com/plexusnet/plexus/internal/testing/kubetest"
)

// TestControlPlane starts one etcd with two API servers on it and checks
// what the rest of the project relies on: core objects round-trip, the CRDs
// are served, ExternalWorkload validation and its status subresource work,
// the clusters are separate and RBAC is enforced.
func TestControlPlane(t *testing.T) {
	start := time.Now()
	etcd := kubetest.StartEtcd(t)
	etcdUp := time.Since(start)
	a := kubetest.StartAPIServer(t, etcd, kubetest.WithName("a"))
	apiUp := time.Since(start)
	kubetest.InstallCRDs(t, a.Config)
	crdsUp := time.Since(start)
	t.Logf("start-up: etcd %s, kube-apiserver %s, CRDs %s (cumulative)",
		etcdUp.Round(time.Millisecond), apiUp.Round(time.Millisecond), crdsUp.Round(time.Millisecond))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)

	t.Run("service round trip", func(t *testing.T) {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: metav1.NamespaceDefault},
			Spec: corev1.ServiceSpec{
				Selector: map[string]string{"app": "web"},
				Ports:    []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
			},
		}
		_, err := a.Clientset.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{})
		require.NoError(t, err)
		got, err := a.Clientset.CoreV1().Services(svc.Namespace).Get(ctx, svc.Name, metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, svc.Spec.Selector, got.Spec.Selector)
		require.Equal(t, int32(80), got.Spec.Ports[0].Port)
		ip, err := netip.ParseAddr(got.Spec.ClusterIP)
		require.NoError(t, err, "the API server allocates a cluster IP")
		require.True(t, netip.MustParsePrefix(kubetest.DefaultServiceClusterIPRange).Contains(ip), ip)
	})

	t.Run("pods without a service account", func(t *testing.T) {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: metav1.NamespaceDefault, Labels: map[string]string{"app": "web"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "web"}}},
		}
		pods := a.Clientset.CoreV1().Pods(pod.Namespace)
		created, err := pods.Create(ctx, pod, metav1.CreateOptions{})
		require.NoError(t, err)
		created.Status.PodIP = "10.1.0.5"
		created.Status.PodIPs = []corev1.PodIP{{IP: "10.1.0.5"}}
		created.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		updated, err := pods.UpdateStatus(ctx, created, metav1.UpdateOptions{})
		require.NoError(t, err)
		require.Equal(t, "10.1.0.5", updated.Status.PodIP)
	})

	t.Run("service export", func(t *testing.T) {
		mcs, err := mcsclient.NewForConfig(a.Config)
		require.NoError(t, err)
		export := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: metav1.NamespaceDefault}}
		_, err = mcs.MulticlusterV1beta1().ServiceExports(export.Namespace).Create(ctx, export, metav1.CreateOptions{})
		require.NoError(t, err)
		got, err := mcs.MulticlusterV1beta1().ServiceExports(export.Namespace).Get(ctx, "web", metav1.GetOptions{})
		require.NoError(t, err)
		require.NotEmpty(t, got.UID)

		imp := &mcsv1beta1.ServiceImport{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: metav1.NamespaceDefault},
			Spec: mcsv1beta1.ServiceImportSpec{
				Type:  mcsv1beta1.ClusterSetIP,
				Ports: []mcsv1beta1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
			},
		}
		_, err = mcs.MulticlusterV1beta1().ServiceImports(imp.Namespace).Create(ctx, imp, metav1.CreateOptions{})
		require.NoError(t, err)
	})

	t.Run("CRDs apply twice", func(t *testing.T) {
		require.NoError(t, kubetest.ApplyCRDs(ctx, a.Config))
	})

	t.Run("external workload", func(t *testing.T) {
		testExternalWorkload(ctx, t, a)
	})

	t.Run("external workload validation", func(t *testing.T) {
		testExternalWorkloadValidation(ctx, t, a)
	})

	t.Run("two clusters on one etcd", func(t *testing.T) {
		b := kubetest.StartAPIServer(t, etcd, kubetest.WithName("b"))
		require.NotEqual(t, a.EtcdPrefix, b.EtcdPrefix)

		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "only-in-a", Namespace: metav1.NamespaceDefault},
			Data:       map[string]string{"cluster": "a"},
		}
		_, err := a.Clientset.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{})
		require.NoError(t, err)
		_, err = b.Clientset.CoreV1().ConfigMaps(cm.Namespace).Get(ctx, cm.Name, metav1.GetOptions{})
		require.True(t, apierrors.IsNotFound(err), "b must not see a's ConfigMap: %v", err)

		cm.Data["cluster"] = "b"
		_, err = b.Clientset.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{})
		require.NoError(t, err, "the same name is free in b")
		got, err := a.Clientset.CoreV1().ConfigMaps(cm.Namespace).Get(ctx, cm.Name, metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, "a", got.Data["cluster"])

		// b has no CRDs of its own until they are installed there.
		_, err = b.Clientset.Discovery().ServerResourcesForGroupVersion(workloadv1alpha1.SchemeGroupVersion.String())
		require.True(t, apierrors.IsNotFound(err), "b must not serve a's CRDs: %v", err)

		// The kubeconfig file works for tools that only take a path.
		cfg, err := clientcmd.BuildConfigFromFlags("", b.Kubeconfig)
		require.NoError(t, err)
		fromFile, err := kubernetes.NewForConfig(cfg)
		require.NoError(t, err)
		got, err = fromFile.CoreV1().ConfigMaps(cm.Namespace).Get(ctx, cm.Name, metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, "b", got.Data["cluster"])
	})

	t.Run("RBAC is enforced", func(t *testing.T) {
		cfg, err := a.UserConfig("jane", "testers")
		require.NoError(t, err)
		jane, err := kubernetes.NewForConfig(cfg)
		require.NoError(t, err)
		_, err = jane.CoreV1().Services(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		require.True(t, apierrors.IsForbidden(err), "no role grants jane anything yet: %v", err)

		// The aggregated roles (view, edit, admin) stay empty without the
		// controller manager, so the test brings its own role.
		role := &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: "service-reader", Namespace: metav1.NamespaceDefault},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"get", "list", "watch"}}},
		}
		_, err = a.Clientset.RbacV1().Roles(role.Namespace).Create(ctx, role, metav1.CreateOptions{})
		require.NoError(t, err)
		binding := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "testers-read-services", Namespace: metav1.NamespaceDefault},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "testers"}},
		}
		_, err = a.Clientset.RbacV1().RoleBindings(binding.Namespace).Create(ctx, binding, metav1.CreateOptions{})
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			_, err := jane.CoreV1().Services(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
			return err == nil
		}, 10*time.Second, 50*time.Millisecond, "the role lets the group list services")
		_, err = jane.CoreV1().ConfigMaps(metav1.NamespaceDefault).Create(ctx,
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "nope"}}, metav1.CreateOptions{})
		require.True(t, apierrors.IsForbidden(err), "the role does not allow writes: %v", err)
	})
}

func testExternalWorkload(ctx context.Context, t *testing.T, c *kubetest.Cluster) {
	rc, err := workloadclient.NewRESTClient(c.Config)
	require.NoError(t, err)
	workloads := workloadclient.ForNamespace(rc, metav1.NamespaceDefault)

	informer := workloadclient.NewInformer(rc, metav1.NamespaceAll, 0)
	informerCtx, stopInformer := context.WithCancel(ctx)
	defer stopInformer()
	go informer.RunWithContext(informerCtx)
	require.True(t, cache.WaitForCacheSync(informerCtx.Done(), informer.HasSynced))

	vm := &workloadv1alpha1.ExternalWorkload{
		ObjectMeta: metav1.ObjectMeta{Name: "vm-1", Namespace: metav1.NamespaceDefault, Labels: map[string]string{"app": "web"}},
		Spec: workloadv1alpha1.ExternalWorkloadSpec{
			WorkloadIPs: []string{"10.20.0.7", "fd00::7"},
			Ports:       []workloadv1alpha1.WorkloadPort{{Name: "http", Port: 8080}, {Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}},
			Zone:        "zone-a",
			Node:        "host-1.example.com",
			Hostname:    "vm-1",
		},
		// The status subresource makes the server drop this on create.
		Status: workloadv1alpha1.ExternalWorkloadStatus{ObservedGeneration: 42},
	}
	created, err := workloads.Create(ctx, vm, metav1.CreateOptions{})
	require.NoError(t, err)
	require.Equal(t, int32(workloadv1alpha1.DefaultTTLSeconds), created.Spec.TTLSeconds, "ttlSeconds defaults")
	require.Equal(t, corev1.ProtocolTCP, created.Spec.Ports[0].Protocol, "protocol defaults")
	require.Equal(t, corev1.ProtocolUDP, created.Spec.Ports[1].Protocol)
	require.Zero(t, created.Status.ObservedGeneration, "status is not writable on create")
	require.EqualValues(t, 1, created.Generation)

	now := metav1.NewMicroTime(time.Now())
	created.Status.ObservedGeneration = created.Generation
	created.Status.LastHeartbeatTime = &now
	meta.SetStatusCondition(&created.Status.Conditions, metav1.Condition{
		Type: workloadv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: workloadv1alpha1.ReasonReported,
	})
	// A spec change through the status subresource must be ignored.
	created.Spec.Zone = "zone-b"
	updated, err := workloads.UpdateStatus(ctx, created, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Equal(t, "zone-a", updated.Spec.Zone)
	require.EqualValues(t, 1, updated.Generation, "status updates do not bump the generation")
	require.EqualValues(t, 1, updated.Status.ObservedGeneration)
	require.True(t, updated.IsReady(time.Now()))
	require.WithinDuration(t, now.Time, updated.Status.LastHeartbeatTime.Time, time.Millisecond,
		"heartbeats keep sub-second precision")

	// A stale resourceVersion loses.
	_, err = workloads.UpdateStatus(ctx, created, metav1.UpdateOptions{})
	require.True(t, apierrors.IsConflict(err), "%v", err)

	patched, err := workloads.Patch(ctx, "vm-1", types.MergePatchType, []byte(`{"spec":{"zone":"zone-c"}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	require.Equal(t, "zone-c", patched.Spec.Zone)
	require.EqualValues(t, 2, patched.Generation)

	list, err := workloads.List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	require.NoError(t, err)
	require.Len(t, list.Items, 1)

	require.Eventually(t, func() bool {
		obj, ok, err := informer.GetStore().GetByKey("default/vm-1")
		if err != nil || !ok {
			return false
		}
		w := obj.(*workloadv1alpha1.ExternalWorkload)
		return w.Spec.Zone == "zone-c" && meta.IsStatusConditionTrue(w.Status.Conditions, workloadv1alpha1.ConditionReady)
	}, 10*time.Second, 20*time.Millisecond, "the informer follows the workload")

	// Deleting guarded by a uid that does not match fails.
	wrongUID := types.UID("00000000-0000-0000-0000-000000000000")
	err = workloads.Delete(ctx, "vm-1", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &wrongUID}})
	require.True(t, apierrors.IsConflict(err), "%v", err)
	require.NoError(t, workloads.Delete(ctx, "vm-1", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &created.UID}}))
	_, err = workloads.Get(ctx, "vm-1", metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "%v", err)
	require.Eventually(t, func() bool {
		_, ok, _ := informer.GetStore().GetByKey("default/vm-1")
		return !ok
	}, 10*time.Second, 20*time.Millisecond, "the informer sees the delete")
}

func testExternalWorkloadValidation(ctx context.Context, t *testing.T, c *kubetest.Cluster) {
	rc, err := workloadclient.NewRESTClient(c.Config)
	require.NoError(t, err)
	workloads := workloadclient.ForNamespace(rc, metav1.NamespaceDefault)
	ports := func(ps ...workloadv1alpha1.WorkloadPort) []workloadv1alpha1.WorkloadPort { return ps }

	tests := []struct {
		name    string
		spec    workloadv1alpha1.ExternalWorkloadSpec
		valid   bool
		wantErr string
	}{
		{name: "ipv4", spec: workloadv1alpha1.ExternalWorkloadSpec{WorkloadIPs: []string{"192.0.2.1"}}, valid: true},
		{name: "dual stack", spec: workloadv1alpha1.ExternalWorkloadSpec{WorkloadIPs: []string{"2001:db8::1", "192.0.2.1"}}, valid: true},
		{name: "pool without addresses yet", spec: workloadv1alpha1.ExternalWorkloadSpec{Pool: "pools/vms"}, valid: true},
		{name: "one unnamed port", spec: workloadv1alpha1.ExternalWorkloadSpec{WorkloadIPs: []string{"192.0.2.1"}, Ports: ports(workloadv1alpha1.WorkloadPort{Port: 80})}, valid: true},
		{name: "no addresses and no pool", spec: workloadv1alpha1.ExternalWorkloadSpec{}, wantErr: "workloadIPs is required unless"},
		{name: "two IPv4", spec: workloadv1alpha1.ExternalWorkloadSpec{WorkloadIPs: []string{"192.0.2.1", "192.0.2.2"}}, wantErr: "at most one address per IP family"},
		{name: "three addresses", spec: workloadv1alpha1.ExternalWorkloadSpec{WorkloadIPs: []string{"192.0.2.1", "2001:db8::1", "2001:db8::2"}}, wantErr: "must have at most 2 items"},
		{name: "same address twice", spec: workloadv1alpha1.ExternalWorkloadSpec{WorkloadIPs: []string{"192.0.2.1", "192.0.2.1"}}, wantErr: "Duplicate value"},
		{name: "not an address", spec: workloadv1alpha1.ExternalWorkloadSpec{WorkloadIPs: []string{"vm.example.com"}}, wantErr: "canonical form"},
		{name: "leading zero", spec: workloadv1alpha1.ExternalWorkloadSpec{WorkloadIPs: []string{"192.0.2.01"}}, wantErr: "canonical form"},
		{name: "non-canonical IPv6", spec: workloadv1alpha1.ExternalWorkloadSpec{WorkloadIPs: []string{"2001:DB8::1"}}, wantErr: "canonical form"},
		{name: "IPv4-mapped IPv6", spec: workloadv1alpha1.ExternalWorkloadSpec{WorkloadIPs: []string{"::ffff:192.0.2.1"}}, wantErr: "canonical form"},
		{name: "loopback", spec: workloadv1alpha1.ExternalWorkloadSpec{WorkloadIPs: []string{"127.0.0.1"}}, wantErr: "may not be an unspecified, loopback or link-local address"},
		{name: "link-local", spec: workloadv1alpha1.ExternalWorkloadSpec{WorkloadIPs: []string{"fe80::1"}}, wantErr: "may not be an unspecified, loopback or link-local address"},
		{name: "unspecified", spec: workloadv1alpha1.ExternalWorkloadSpec{WorkloadIPs: []string{"0.0.0.0"}}, wantErr: "may not be an unspecified, loopback or link-local address"},
		{name: "port zero", spec: workloadv1alpha1.ExternalWorkloadSpec{WorkloadIPs: []string{"192.0.2.1"}, Ports: ports(workloadv1alpha1.WorkloadPort{Port: 0})}, wantErr: "greater than or equal to 1"},
		{name: "port too high", spec: workloadv1alpha1.ExternalWorkloadSpec{WorkloadIPs: []string{"192.0.2.1"}, Ports: ports(workloadv1alpha1.WorkloadPort{Port: 65536})}, wantErr: "less than or equal to 65535"},
		{name: "unknown protocol", spec: workloadv1alpha1.ExternalWorkloadSpec{WorkloadIPs: []string{"192.0.2.1"}, Ports: ports(workloadv1alpha1.WorkloadPort{Port: 80, Protocol: "ICMP"})}, wantErr: "Unsupported value"},
		{name: "two unnamed ports", spec: workloadv1alpha1.ExternalWorkloadSpec{WorkloadIPs: []string{"192.0.2.1"}, Ports: ports(workloadv1alpha1.WorkloadPort{Port: 80}, workloadv1alpha1.WorkloadPort{Port: 81})}, wantErr: "ports must have unique names"},
		{name: "duplicate port names", spec: workloadv1alpha1.ExternalWorkloadSpec{WorkloadIPs: []string{"192.0.2.1"}, Ports: ports(workloadv1alpha1.WorkloadPort{Name: "a", Port: 80}, workloadv1alpha1.WorkloadPort{Name: "a", Port: 81})}, wantErr: "ports must have unique names"},
		{name: "pool not a resource name", spec: workloadv1alpha1.ExternalWorkloadSpec{Pool: "vms"}, wantErr: "spec.pool"},
		{name: "hostname not a DNS label", spec: workloadv1alpha1.ExternalWorkloadSpec{WorkloadIPs: []string{"192.0.2.1"}, Hostname: "vm_1"}, wantErr: "spec.hostname"},
		{name: "negative ttl", spec: workloadv1alpha1.ExternalWorkloadSpec{WorkloadIPs: []string{"192.0.2.1"}, TTLSeconds: -1}, wantErr: "greater than or equal to 1"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := &workloadv1alpha1.ExternalWorkload{
				ObjectMeta: metav1.ObjectMeta{Name: "validation-" + string(rune('a'+i)), Namespace: metav1.NamespaceDefault},
				Spec:       tc.spec,
			}
			_, err := workloads.Create(ctx, w, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if tc.valid {
				require.NoError(t, err)
				return
			}
			require.True(t, apierrors.IsInvalid(err), "want Invalid, got %v", err)
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

// TestPodRunner: a Pod is bound, reported Running and Ready with an
// address of the pod range, and removed at once when deleted, as a kubelet
// would confirm it.
func TestPodRunner(t *testing.T) {
	etcd := kubetest.StartEtcd(t)
	c := kubetest.StartAPIServer(t, etcd, kubetest.WithName("pods"))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r := kubetest.NewPodRunner(c.Clientset, "node-1", netip.MustParsePrefix("10.128.0.0/16"), slog.New(slog.DiscardHandler))
	go func() { _ = r.Run(ctx) }()

	pods := c.Clientset.CoreV1().Pods("default")
	_, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	var p *corev1.Pod
	require.Eventually(t, func() bool {
		p, err = pods.Get(ctx, "web", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning
	}, 20*time.Second, 20*time.Millisecond)
	require.Equal(t, "node-1", p.Spec.NodeName)
	require.True(t, netip.MustParsePrefix("10.128.0.0/16").Contains(netip.MustParseAddr(p.Status.PodIP)))
	ready := false
	for _, cond := range p.Status.Conditions {
		ready = ready || (cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue)
	}
	require.True(t, ready)

	require.NoError(t, pods.Delete(ctx, "web", metav1.DeleteOptions{}))
	require.Eventually(t, func() bool {
		_, err := pods.Get(ctx, "web", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}, 20*time.Second, 20*time.Millisecond, "a deleted Pod goes at once")
}

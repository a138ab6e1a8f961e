package deploy

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/plexusnet/plexus/internal/testing/kubetest"
)

// fieldManager owns what the test applies.
const fieldManager = "plexus-deploy-test"

// realKinds are created for real so that access reviews and the admission
// policy can be evaluated; everything else is applied with a server-side
// dry run.
var realKinds = map[string]bool{
	"Namespace":                        true,
	"ServiceAccount":                   true,
	"ClusterRole":                      true,
	"ClusterRoleBinding":               true,
	"Role":                             true,
	"RoleBinding":                      true,
	"ValidatingAdmissionPolicy":        true,
	"ValidatingAdmissionPolicyBinding": true,
}

// TestManifestsAgainstAPIServer applies the manifests, with either
// allocator, to a real kube-apiserver and checks what each ServiceAccount
// may and may not do.
func TestManifestsAgainstAPIServer(t *testing.T) {
	t.Parallel()
	objs, err := Objects()
	require.NoError(t, err)
	etcd, err := FileObjects(EtcdAllocatorFile)
	require.NoError(t, err)
	checkAgainstAPIServer(t, append(objs, etcd...))
}

// checkAgainstAPIServer starts a kube-apiserver with the CRDs, applies objs
// server-side (RBAC, ServiceAccounts, the namespace and the admission
// policy for real, everything else as a dry run), and checks that their
// rules name served resources, that every ServiceAccount may do exactly
// what the access table says, and that the admission policy confines
// repair. Every way of installing (deploy/, the Helm chart) is checked by
// it.
func checkAgainstAPIServer(t *testing.T, objs []Object) {
	etcd := kubetest.StartEtcd(t)
	cluster := kubetest.StartAPIServer(t, etcd)
	kubetest.InstallCRDs(t, cluster.Config)
	ctx := t.Context()

	disco, err := discovery.NewDiscoveryClientForConfig(cluster.Config)
	require.NoError(t, err)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disco))
	dyn, err := dynamic.NewForConfig(cluster.Config)
	require.NoError(t, err)

	// The namespace first, then the other real objects, then the dry
	// runs, which need the namespace to exist.
	ordered := slices.Clone(objs)
	slices.SortStableFunc(ordered, func(a, b Object) int {
		return cmp.Compare(rank(a), rank(b))
	})
	for _, o := range ordered {
		dryRun := !realKinds[o.GetKind()]
		require.NoError(t, apply(ctx, dyn, mapper, o, dryRun), "apply %s %s from %s (dry run %t)", o.GetKind(), o.GetName(), o.File, dryRun)
	}

	t.Run("rules name served resources and verbs", func(t *testing.T) {
		testRulesServed(t, disco, objs)
	})
	t.Run("access reviews", func(t *testing.T) {
		testAccess(t, cluster.Clientset)
	})
	t.Run("repair deletes only importer slices", func(t *testing.T) {
		testRepairDeletePolicy(t, cluster)
	})
}

// rank orders the applies: the namespace, the other real objects, the dry
// runs.
func rank(o Object) int {
	switch {
	case o.GetKind() == "Namespace":
		return 0
	case realKinds[o.GetKind()]:
		return 1
	}
	return 2
}

// apply server-side applies o, as a dry run when dryRun is set, and checks
// that a namespaced object names the Plexus namespace and a cluster-scoped
// one names none.
func apply(ctx context.Context, dyn dynamic.Interface, mapper meta.RESTMapper, o Object, dryRun bool) error {
	gvk := o.GroupVersionKind()
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return err
	}
	var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		if o.GetNamespace() != Namespace {
			return fmt.Errorf("namespaced, but in namespace %q, not %q", o.GetNamespace(), Namespace)
		}
		ri = dyn.Resource(m.Resource).Namespace(o.GetNamespace())
	} else if o.GetNamespace() != "" {
		return fmt.Errorf("cluster-scoped, but names namespace %q", o.GetNamespace())
	}
	opts := metav1.ApplyOptions{FieldManager: fieldManager, Force: true}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	_, err = ri.Apply(ctx, o.GetName(), o.Unstructured, opts)
	return err
}

// testRulesServed checks that every resource and verb a Role or ClusterRole
// grants exists in the API: a misspelt resource or group would grant
// nothing, silently.
func testRulesServed(t *testing.T, disco discovery.DiscoveryInterface, objs []Object) {
	_, lists, err := disco.ServerGroupsAndResources()
	require.NoError(t, err)
	// "group/resource[/subresource]" → verbs, over every served version.
	served := map[string][]string{}
	for _, l := range lists {
		gv, err := schemaGroup(l.GroupVersion)
		require.NoError(t, err)
		for _, r := range l.APIResources {
			key := gv + "/" + r.Name
			served[key] = append(served[key], r.Verbs...)
		}
	}
	checked := 0
	for _, o := range objs {
		if o.GetKind() != "Role" && o.GetKind() != "ClusterRole" {
			continue
		}
		var role rbacv1.ClusterRole // a Role's rules decode the same way
		require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &role))
		require.NotEmpty(t, role.Rules, "%s %s", o.GetKind(), o.GetName())
		for _, rule := range role.Rules {
			require.Empty(t, rule.NonResourceURLs, "%s %s", o.GetKind(), o.GetName())
			for _, g := range rule.APIGroups {
				for _, r := range rule.Resources {
					verbs, ok := served[g+"/"+r]
					require.True(t, ok, "%s %s grants %s in group %q, which the API server does not serve", o.GetKind(), o.GetName(), r, g)
					for _, v := range rule.Verbs {
						require.Contains(t, verbs, v, "%s %s grants %s on %s/%s, which it does not support", o.GetKind(), o.GetName(), v, g, r)
						checked++
					}
				}
			}
		}
	}
	require.Greater(t, checked, 40)
}

// schemaGroup returns the group of "group/version" ("" for the core "v1").
func schemaGroup(groupVersion string) (string, error) {
	gv, err := schema.ParseGroupVersion(groupVersion)
	return gv.Group, err
}

// access is one access review: may the ServiceAccount do verb on resource
// ("resource[.group][/subresource]") in namespace ("" for every namespace
// or a cluster-scoped resource), on the object name (any when "")?
type access struct {
	sa        string
	verb      string
	resource  string
	namespace string
	name      string
	allowed   bool
}

func (a access) String() string {
	verdict := "cannot"
	if a.allowed {
		verdict = "can"
	}
	where := "anywhere"
	if a.namespace != "" {
		where = "in " + a.namespace
	}
	obj := a.resource
	if a.name != "" {
		obj += " " + a.name
	}
	return fmt.Sprintf("%s %s %s %s %s", a.sa, verdict, a.verb, obj, where)
}

// grant lists the reviews that verbs on resources (anywhere) are allowed.
func grant(sa string, verbs []string, resources ...string) []access {
	var out []access
	for _, r := range resources {
		for _, v := range verbs {
			out = append(out, access{sa: sa, verb: v, resource: r, allowed: true})
		}
	}
	return out
}

// deny lists the reviews that verbs on resources (anywhere) are denied.
func deny(sa string, verbs []string, resources ...string) []access {
	out := grant(sa, verbs, resources...)
	for i := range out {
		out[i].allowed = false
	}
	return out
}

// leases lists the leader election reviews of sa, whose Lease is lease.
func leases(sa, lease, otherLease string) []access {
	const r = "leases.coordination.k8s.io"
	return []access{
		{sa: sa, verb: "create", resource: r, namespace: Namespace, allowed: true},
		{sa: sa, verb: "get", resource: r, namespace: Namespace, name: lease, allowed: true},
		{sa: sa, verb: "update", resource: r, namespace: Namespace, name: lease, allowed: true},
		// Only its own Lease, only in its own namespace.
		{sa: sa, verb: "get", resource: r, namespace: Namespace, name: otherLease},
		{sa: sa, verb: "update", resource: r, namespace: Namespace, name: otherLease},
		{sa: sa, verb: "delete", resource: r, namespace: Namespace, name: lease},
		{sa: sa, verb: "list", resource: r, namespace: Namespace},
		{sa: sa, verb: "create", resource: r, namespace: metav1.NamespaceDefault},
		{sa: sa, verb: "create", resource: r, namespace: metav1.NamespaceSystem},
		{sa: sa, verb: "update", resource: r, namespace: metav1.NamespaceSystem, name: "kube-controller-manager"},
		{sa: sa, verb: "update", resource: r},
	}
}

const (
	allocator  = "plexus-allocator"
	membership = "plexus-membership"
	importer   = "plexus-importer"
	repair     = "plexus-repair"
)

var (
	readOnly = []string{"list", "watch"}
	writes   = []string{"create", "update", "delete"}
	emit     = []string{"create", "patch"}
)

// accessTable is what each service needs (from its code; see the comments
// of the ClusterRoles) and a sample of what it must not do.
func accessTable() []access {
	var t []access
	add := func(a ...access) { t = append(t, a...) }

	// allocator: no Kubernetes API access at all.
	add(deny(allocator, []string{"get", "list", "watch", "create", "update", "patch", "delete"},
		"pods", "services", "endpointslices.discovery.k8s.io", "serviceimports.multicluster.x-k8s.io",
		"externalworkloads.workload.plexus.dev", "events", "configmaps", "persistentvolumeclaims")...)
	add(access{sa: allocator, verb: "create", resource: "leases.coordination.k8s.io", namespace: Namespace},
		access{sa: allocator, verb: "get", resource: "configmaps", namespace: Namespace, name: "plexus-cluster"})

	// membership: informers, and ExternalWorkloads as its registry.
	add(grant(membership, readOnly, "pods", "services", "nodes", "serviceexports.multicluster.x-k8s.io")...)
	add(grant(membership, []string{"get", "list", "watch", "create", "update", "delete"}, "externalworkloads.workload.plexus.dev")...)
	add(grant(membership, []string{"update"}, "externalworkloads.workload.plexus.dev/status")...)
	add(grant(membership, []string{"update"}, "serviceexports.multicluster.x-k8s.io/status")...)
	add(deny(membership, []string{"patch"}, "serviceexports.multicluster.x-k8s.io/status")...)
	add(deny(membership, []string{"patch", "deletecollection"}, "externalworkloads.workload.plexus.dev")...)
	add(deny(membership, []string{"patch"}, "externalworkloads.workload.plexus.dev/status")...)
	add(deny(membership, []string{"get", "create", "update", "patch", "delete"}, "pods", "services", "nodes")...)
	add(deny(membership, []string{"update"}, "pods/status", "services/status")...)
	add(deny(membership, []string{"create", "update", "delete"}, "endpointslices.discovery.k8s.io",
		"serviceexports.multicluster.x-k8s.io", "serviceimports.multicluster.x-k8s.io")...)
	add(deny(membership, []string{"list"}, "endpointslices.discovery.k8s.io", "serviceimports.multicluster.x-k8s.io")...)
	add(deny(membership, emit, "events")...) // it records no Events
	add(deny(membership, []string{"create", "get", "update"}, "leases.coordination.k8s.io")...)

	// The cluster's id: the two well-known ClusterProperties, read only;
	// the fleet: ClusterProfiles, listed and watched by the importer and
	// repair.
	for _, sa := range []string{membership, importer, repair} {
		for _, name := range []string{"cluster.clusterset.k8s.io", "clusterset.k8s.io"} {
			add(access{sa: sa, verb: "get", resource: "clusterproperties.about.k8s.io", name: name, allowed: true})
		}
		add(access{sa: sa, verb: "get", resource: "clusterproperties.about.k8s.io", name: "other.example.com"})
		add(deny(sa, []string{"list", "create", "update", "delete"}, "clusterproperties.about.k8s.io")...)
		add(deny(sa, []string{"create", "update", "patch", "delete"}, "clusterprofiles.multicluster.x-k8s.io")...)
	}
	add(grant(importer, []string{"list", "watch"}, "clusterprofiles.multicluster.x-k8s.io")...)
	add(grant(repair, []string{"list", "watch"}, "clusterprofiles.multicluster.x-k8s.io")...)
	add(deny(membership, []string{"list", "watch"}, "clusterprofiles.multicluster.x-k8s.io")...)
	// The clusterset policy: membership and the importer follow it, repair
	// has no use for it, and nobody writes it.
	add(grant(membership, []string{"list", "watch"}, "clustersetpolicies.policy.plexus.dev")...)
	add(grant(importer, []string{"list", "watch"}, "clustersetpolicies.policy.plexus.dev")...)
	add(deny(repair, []string{"get", "list", "watch"}, "clustersetpolicies.policy.plexus.dev")...)
	add(deny(allocator, []string{"get", "list", "watch"}, "clustersetpolicies.policy.plexus.dev")...)
	for _, sa := range []string{membership, importer, repair} {
		add(deny(sa, []string{"create", "update", "patch", "delete"}, "clustersetpolicies.policy.plexus.dev")...)
	}

	// importer: writes imports, derived Services and slices; elects a
	// leader; records Events.
	add(grant(importer, append(slices.Clone(readOnly), writes...),
		"endpointslices.discovery.k8s.io", "services", "serviceimports.multicluster.x-k8s.io")...)
	add(grant(importer, []string{"update"}, "serviceimports.multicluster.x-k8s.io/status")...)
	add(grant(importer, readOnly, "namespaces", "serviceexports.multicluster.x-k8s.io")...)
	add(grant(importer, []string{"update"}, "serviceexports.multicluster.x-k8s.io/status")...)
	add(grant(importer, []string{"get", "create"}, "servicecidrs.networking.k8s.io")...)
	add(deny(importer, []string{"update", "patch", "delete"}, "servicecidrs.networking.k8s.io")...)
	add(deny(importer, []string{"patch"}, "serviceexports.multicluster.x-k8s.io/status")...)
	add(grant(importer, emit, "events")...)
	add(access{sa: importer, verb: "create", resource: "events", namespace: metav1.NamespaceDefault, allowed: true})
	add(leases(importer, "plexus-importer", "plexus-repair")...)
	add(deny(importer, []string{"patch", "deletecollection"}, "endpointslices.discovery.k8s.io", "services",
		"serviceimports.multicluster.x-k8s.io")...)
	add(deny(importer, []string{"get", "delete", "update", "create"}, "pods")...)
	add(deny(importer, []string{"update", "patch"}, "services/status")...)
	add(deny(importer, []string{"patch"}, "serviceimports.multicluster.x-k8s.io/status")...)
	add(deny(importer, []string{"create", "update", "delete"}, "namespaces", "serviceexports.multicluster.x-k8s.io",
		"externalworkloads.workload.plexus.dev")...)
	add(deny(importer, []string{"update", "delete"}, "events")...)

	// repair: reads owners and the importer's slices, deletes orphaned
	// slices, elects a leader, records Events.
	add(grant(repair, readOnly, "pods", "services", "serviceimports.multicluster.x-k8s.io",
		"externalworkloads.workload.plexus.dev", "endpointslices.discovery.k8s.io")...)
	add(grant(repair, []string{"delete"}, "endpointslices.discovery.k8s.io")...)
	add(grant(repair, emit, "events")...)
	add(leases(repair, "plexus-repair", "plexus-importer")...)
	add(deny(repair, []string{"create", "update", "patch", "deletecollection"}, "endpointslices.discovery.k8s.io")...)
	add(deny(repair, []string{"create", "update", "patch", "delete"}, "services", "pods",
		"serviceimports.multicluster.x-k8s.io", "externalworkloads.workload.plexus.dev")...)
	add(deny(repair, []string{"update"}, "serviceimports.multicluster.x-k8s.io/status",
		"externalworkloads.workload.plexus.dev/status", "pods/status")...)
	add(deny(repair, []string{"get"}, "pods", "services")...)

	// Nobody reads Secrets or holds a wildcard.
	for _, sa := range []string{allocator, membership, importer, repair} {
		add(deny(sa, []string{"get", "list", "watch"}, "secrets")...)
		add(access{sa: sa, verb: "get", resource: "secrets", namespace: Namespace},
			access{sa: sa, verb: "*", resource: "*.*"},
			access{sa: sa, verb: "create", resource: "pods/exec", namespace: Namespace},
			access{sa: sa, verb: "create", resource: "serviceaccounts/token", namespace: Namespace},
			access{sa: sa, verb: "escalate", resource: "clusterroles.rbac.authorization.k8s.io"},
			access{sa: sa, verb: "update", resource: "validatingadmissionpolicies.admissionregistration.k8s.io"})
	}
	return t
}

// resourceAttributes turns "resource[.group][/subresource]" into review
// attributes.
func (a access) resourceAttributes() *authorizationv1.ResourceAttributes {
	res, sub, _ := strings.Cut(a.resource, "/")
	res, group, _ := strings.Cut(res, ".")
	return &authorizationv1.ResourceAttributes{
		Namespace:   a.namespace,
		Verb:        a.verb,
		Group:       group,
		Resource:    res,
		Subresource: sub,
		Name:        a.name,
	}
}

// serviceAccountUser is the user name of a ServiceAccount of the namespace.
func serviceAccountUser(sa string) string {
	return "system:serviceaccount:" + Namespace + ":" + sa
}

// testAccess asks the API server's authorizer, through SubjectAccessReviews
// with the groups a ServiceAccount token carries, about every row of the
// access table.
func testAccess(t *testing.T, client kubernetes.Interface) {
	reviews := client.AuthorizationV1().SubjectAccessReviews()
	for _, a := range accessTable() {
		t.Run(a.String(), func(t *testing.T) {
			sar, err := reviews.Create(t.Context(), &authorizationv1.SubjectAccessReview{
				Spec: authorizationv1.SubjectAccessReviewSpec{
					User:               serviceAccountUser(a.sa),
					Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + Namespace, "system:authenticated"},
					ResourceAttributes: a.resourceAttributes(),
				},
			}, metav1.CreateOptions{})
			require.NoError(t, err)
			require.Equal(t, a.allowed, sar.Status.Allowed, "%s: %s", a, sar.Status.Reason)
		})
	}
}

// testRepairDeletePolicy deletes EndpointSlices as the repair
// ServiceAccount (impersonated) and as the admin, to show that the
// ValidatingAdmissionPolicy confines repair to the importer's slices and
// nobody else.
func testRepairDeletePolicy(t *testing.T, cluster *kubetest.Cluster) {
	ctx := t.Context()
	admin := cluster.Clientset
	const ns = "shop"
	_, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)

	cfg := rest.CopyConfig(cluster.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: serviceAccountUser(repair)}
	asRepair, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)

	slicesIn := admin.DiscoveryV1().EndpointSlices(ns)
	create := func(name, managedBy string) error {
		s := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
			AddressType: discoveryv1.AddressTypeIPv4,
		}
		if managedBy != "" {
			s.Labels[discoveryv1.LabelManagedBy] = managedBy
		}
		_, err := slicesIn.Create(ctx, s, metav1.CreateOptions{})
		return err
	}

	// The policy takes effect a moment after it is created: until then
	// the canary's delete goes through, and the canary is put back.
	require.Eventually(t, func() bool {
		_, err := slicesIn.Get(ctx, "canary", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			err = create("canary", "endpointslice-controller.k8s.io")
		}
		if err != nil {
			return false
		}
		err = asRepair.DiscoveryV1().EndpointSlices(ns).Delete(ctx, "canary", metav1.DeleteOptions{})
		return apierrors.IsForbidden(err)
	}, 20*time.Second, 100*time.Millisecond, "the admission policy never denied repair")

	tests := []struct {
		name      string
		managedBy string // "" for no label
		asAdmin   bool
		allowed   bool
	}{
		{name: "repair deletes an importer slice", managedBy: "importer.plexus.dev", allowed: true},
		{name: "repair cannot delete the EndpointSlice controller's slice", managedBy: "endpointslice-controller.k8s.io"},
		{name: "repair cannot delete an unmanaged slice", managedBy: ""},
		{name: "repair cannot delete a look-alike", managedBy: "importer.plexus.dev.evil"},
		{name: "others are not bound by the policy", managedBy: "endpointslice-controller.k8s.io", asAdmin: true, allowed: true},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("slice-%d", i)
			require.NoError(t, create(name, tc.managedBy))
			var client kubernetes.Interface = asRepair
			if tc.asAdmin {
				client = admin
			}
			err := client.DiscoveryV1().EndpointSlices(ns).Delete(ctx, name, metav1.DeleteOptions{})
			_, getErr := slicesIn.Get(ctx, name, metav1.GetOptions{})
			if tc.allowed {
				require.NoError(t, err)
				require.True(t, apierrors.IsNotFound(getErr), "the slice is gone: %v", getErr)
				return
			}
			require.True(t, apierrors.IsForbidden(err), "want Forbidden, got %v", err)
			// Denied by the policy, which RBAC alone would not do.
			require.ErrorContains(t, err, "plexus-repair-deletes-only-importer-slices")
			require.ErrorContains(t, err, "may only delete EndpointSlices managed by importer.plexus.dev")
			require.NoError(t, getErr, "the slice is still there")
		})
	}
}

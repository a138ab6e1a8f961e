package app_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	importerv1 "github.com/plexusnet/plexus/api/importer/v1"
	membershipv1 "github.com/plexusnet/plexus/api/membership/v1"
	"github.com/plexusnet/plexus/internal/mcsnames"
	"github.com/plexusnet/plexus/services/importer/sourcetest"
)

// refuseSlices makes the member cluster's API server refuse (422 Invalid)
// every EndpointSlice write for which the CEL expression deny holds, the
// way an admission policy of a real cluster would, and waits until it is
// enforced. It returns a function that lifts the policy.
func (e *env) refuseSlices(t *testing.T, name, deny string) func() {
	t.Helper()
	ctx := ctxFor(t)
	adm := e.kube.AdmissionregistrationV1()
	invalid := metav1.StatusReasonInvalid
	_, err := adm.ValidatingAdmissionPolicies().Create(ctx, &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
					Rule:       admissionv1.Rule{APIGroups: []string{"discovery.k8s.io"}, APIVersions: []string{"v1"}, Resources: []string{"endpointslices"}},
				},
			}}},
			Validations: []admissionv1.Validation{{Expression: "!(" + deny + ")", Message: "refused by test policy " + name, Reason: &invalid}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = adm.ValidatingAdmissionPolicyBindings().Create(ctx, &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name, ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	return func() {
		require.NoError(t, adm.ValidatingAdmissionPolicyBindings().Delete(context.Background(), name, metav1.DeleteOptions{}))
		require.NoError(t, adm.ValidatingAdmissionPolicies().Delete(context.Background(), name, metav1.DeleteOptions{}))
	}
}

// awaitRefused waits until the API server refuses to create probe.
func (e *env) awaitRefused(t *testing.T, probe *discovery.EndpointSlice) {
	t.Helper()
	require.Eventually(t, func() bool {
		s, err := e.kube.DiscoveryV1().EndpointSlices(probe.Namespace).Create(context.Background(), probe, metav1.CreateOptions{})
		if err == nil {
			_ = e.kube.DiscoveryV1().EndpointSlices(probe.Namespace).Delete(context.Background(), s.Name, metav1.DeleteOptions{})
			return false
		}
		return apierrors.IsInvalid(err)
	}, waitFor, 200*time.Millisecond, "the admission policy was not enforced")
}

// awaitAdmitted waits until the API server would create probe (a dry
// run): a policy that refused it is gone from admission.
func (e *env) awaitAdmitted(t *testing.T, probe *discovery.EndpointSlice) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := e.kube.DiscoveryV1().EndpointSlices(probe.Namespace).Create(context.Background(), probe,
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		assert.NoError(c, err, "the admission policy is still enforced")
	}, waitFor, 100*time.Millisecond)
}

func probeSlice(ns string, labels map[string]string, addr string) *discovery.EndpointSlice {
	return &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, GenerateName: "probe-", Labels: labels},
		AddressType: discovery.AddressTypeIPv4,
		Endpoints:   []discovery.Endpoint{{Addresses: []string{addr}}},
	}
}

func grpcCluster(si *importerv1.ServiceImport, cluster string) *importerv1.ClusterStatus {
	for _, c := range si.GetClusters() {
		if c.GetCluster() == cluster {
			return c
		}
	}
	return nil
}

// TestRefusedClusterDoesNotFreezeOthers: when the API server refuses one
// source cluster's slices, the other clusters' changes still land within
// seconds, the import says it is not Ready and why (condition, Event,
// metric, gRPC), and the refused cluster recovers with its next change.
// Before, the reconcile stopped at the refused cluster, so clusters sorted
// after it were never written, and the import still said Ready.
func TestRefusedClusterDoesNotFreezeOthers(t *testing.T) {
	e := newEnv(t)
	e.pool(t, "vips", "10.96.100.0/24")
	e.namespace(t, "shop")
	const pusher = "a-vms" // sorts before the real source
	lift := e.refuseSlices(t, "refuse-a-vms",
		fmt.Sprintf("has(object.metadata.labels) && object.metadata.labels[?'%s'].orValue('') == '%s'", mcsnames.LabelSourceCluster, pusher))
	probe := probeSlice("shop", map[string]string{mcsnames.LabelSourceCluster: pusher}, "10.9.9.9")
	e.awaitRefused(t, probe)

	east := sourcetest.Start(t, "east")
	im := e.startImporter(t, e.options("vips"), east)
	east.Set(sourcetest.Endpoints("shop", "web", []string{"http=80"}, "10.1.0.1", "10.1.0.2"))
	push := sourcetest.Endpoints("shop", "web", []string{"http=80"}, "10.3.0.1")
	push.Cluster = pusher
	_, err := im.api.ApplyImport(ctxFor(t), &importerv1.ApplyImportRequest{Endpoints: push})
	require.NoError(t, err)

	require.Eventually(t, func() bool {
		si, err := e.serviceImport("shop", "web")
		if err != nil {
			return false
		}
		ready := condition(si, "Ready")
		return ready != nil && ready.Status == metav1.ConditionFalse && ready.Reason == "EndpointSlicesNotWritten" &&
			strings.Contains(ready.Message, pusher) && endpointsIn(e.slicesOf(t, "shop", "web"))["east"] == 2
	}, waitFor, tick, "the refused cluster is reported and the other written")
	got := im.get(t, "shop", "web")
	require.Contains(t, grpcCluster(got, pusher).GetProblem(), "slices not written")
	require.Zero(t, grpcCluster(got, pusher).GetEndpoints(), "nothing of it is written")
	require.EqualValues(t, 1, grpcCluster(got, pusher).GetExportedEndpoints())
	require.EqualValues(t, 2, grpcCluster(got, "east").GetEndpoints())
	require.Positive(t, counter(t, im.registry, "plexus_importer_cluster_write_failures_total", map[string]string{"cluster": pusher}))
	require.Eventually(t, func() bool {
		evs, err := e.kube.CoreV1().Events("shop").List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.kind=ServiceImport,involvedObject.name=web"})
		return err == nil && slices.ContainsFunc(evs.Items, func(ev corev1.Event) bool { return ev.Reason == "EndpointSlicesNotWritten" })
	}, waitFor, tick, "no Event on the ServiceImport")

	// A real source's change lands within seconds.
	start := time.Now()
	east.Set(sourcetest.Endpoints("shop", "web", []string{"http=80"}, "10.1.0.1", "10.1.0.2", "10.1.0.3"))
	require.Eventually(t, func() bool { return endpointsIn(e.slicesOf(t, "shop", "web"))["east"] == 3 }, 10*time.Second, tick)
	t.Logf("east's change landed in %v while %s was refused", time.Since(start).Round(time.Millisecond), pusher)

	// Once the cluster's slices can be written, its next change recovers it.
	lift()
	e.awaitAdmitted(t, probe)
	push.Groups[0].Endpoints = append(push.Groups[0].Endpoints, &membershipv1.Endpoint{Addresses: []string{"10.3.0.2"}, Conditions: &membershipv1.EndpointConditions{Ready: true}})
	_, err = im.api.ApplyImport(ctxFor(t), &importerv1.ApplyImportRequest{Endpoints: push})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		si, err := e.serviceImport("shop", "web")
		if err != nil {
			return false
		}
		ready := condition(si, "Ready")
		return ready != nil && ready.Status == metav1.ConditionTrue && endpointsIn(e.slicesOf(t, "shop", "web"))[pusher] == 2
	}, waitFor, tick, "the refused cluster did not recover")
}

func addrs(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s.%d.%d", prefix, i/250, i%250+1)
	}
	return out
}

// TestReplacementWithBadEntries: 10,000 endpoints replaced by 10,000 others
// of which one the API server refuses. The refused endpoint is dropped and
// the rest written: no mixture of old and new. And when the API server
// refuses one slice of the replacement (an admission policy), the import
// is not Ready and its counts are what was written, until the next change
// converges.
func TestReplacementWithBadEntries(t *testing.T) {
	e := newEnv(t)
	e.pool(t, "vips", "10.96.100.0/24")
	e.namespace(t, "shop")
	east := sourcetest.Start(t, "east")
	im := e.startImporter(t, e.options("vips"), east)

	east.Set(sourcetest.Endpoints("shop", "web", []string{"http=80"}, addrs("10.1", 10000)...))
	require.Eventually(t, func() bool { return endpointsIn(e.slicesOf(t, "shop", "web"))["east"] == 10000 }, 2*waitFor, 100*time.Millisecond)

	next := addrs("10.2", 10000)
	next[5000] = "127.0.0.1"
	east.Set(sourcetest.Endpoints("shop", "web", []string{"http=80"}, next...))
	require.Eventually(t, func() bool {
		got := im.get(t, "shop", "web")
		c := grpcCluster(got, "east")
		return c.GetEndpoints() == 9999 && c.GetDroppedEndpoints() == 1
	}, 2*waitFor, 100*time.Millisecond)
	ss := e.slicesOf(t, "shop", "web")
	for _, s := range ss {
		for _, ep := range s.Endpoints {
			require.Truef(t, strings.HasPrefix(ep.Addresses[0], "10.2."), "slice %s holds %s: old and new mixed", s.Name, ep.Addresses[0])
		}
	}
	require.Equal(t, 9999, endpointsIn(ss)["east"])
	si, err := e.serviceImport("shop", "web")
	require.NoError(t, err)
	require.Equal(t, metav1.ConditionTrue, condition(si, "Ready").Status, "the valid endpoints are all written")
	require.Equal(t, metav1.ConditionTrue, condition(si, "EndpointsDropped").Status)
	require.Contains(t, condition(si, "EndpointsDropped").Message, "east: 1 of 10000")

	// One slice of the next replacement is refused.
	lift := e.refuseSlices(t, "refuse-one", "object.endpoints.exists(ep, '10.4.20.1' in ep.addresses)")
	probe := probeSlice("shop", nil, "10.4.20.1")
	e.awaitRefused(t, probe)
	east.Set(sourcetest.Endpoints("shop", "web", []string{"http=80"}, addrs("10.4", 10000)...))
	require.Eventually(t, func() bool {
		si, err := e.serviceImport("shop", "web")
		return err == nil && condition(si, "Ready").Reason == "EndpointSlicesNotWritten"
	}, 2*waitFor, 100*time.Millisecond, "a partly written replacement is reported as such")
	got := grpcCluster(im.get(t, "shop", "web"), "east")
	written := endpointsIn(e.slicesOf(t, "shop", "web"))["east"]
	require.Less(t, int(got.GetEndpoints()), 10000, "the count is what was written")
	require.Equal(t, written, int(got.GetEndpoints()))

	lift()
	e.awaitAdmitted(t, probe)
	east.Set(sourcetest.Endpoints("shop", "web", []string{"http=80"}, addrs("10.4", 10001)...))
	require.Eventually(t, func() bool {
		si, err := e.serviceImport("shop", "web")
		return err == nil && condition(si, "Ready").Status == metav1.ConditionTrue &&
			endpointsIn(e.slicesOf(t, "shop", "web"))["east"] == 10001
	}, 2*waitFor, 100*time.Millisecond, "the next change converges")
}

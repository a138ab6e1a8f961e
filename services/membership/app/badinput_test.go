package app_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	membershipv1 "github.com/plexusnet/plexus/api/membership/v1"
	workloadclient "github.com/plexusnet/plexus/api/workload/v1alpha1/client"
	"github.com/plexusnet/plexus/internal/apierr"
)

// testUnrecordableAddress: a pool of loopback addresses (which the allocator
// hands out only when told to) gives an address the ExternalWorkload API
// refuses. The registration fails cleanly: no panic, no object, no
// allocation. Before, the registry's rollback dereferenced a nil object
// (INTERNAL) and the allocation was never released.
func testUnrecordableAddress(ctx context.Context, t *testing.T, e *env) {
	const ns = "unrecordable"
	e.namespace(t, ctx, ns)
	_, err := e.alloc.CreatePool(ctx, &allocatorv1.CreatePoolRequest{PoolId: "lo", Pool: &allocatorv1.Pool{Cidrs: []string{"127.0.10.0/28"}}})
	require.Equal(t, "LOCAL_RANGE", apierr.Reason(err), "the allocator refuses a loopback pool by default: %v", err)
	_, err = e.alloc.CreatePool(ctx, &allocatorv1.CreatePoolRequest{PoolId: "lo", Pool: &allocatorv1.Pool{Cidrs: []string{"127.0.10.0/28"}}, AllowLocalRanges: true})
	require.NoError(t, err)

	_, err = register(ctx, e, &membershipv1.Workload{Name: "namespaces/" + ns + "/workloads/vm", AddressPool: "pools/lo", Ready: true})
	require.Error(t, err)
	require.NotEqual(t, codes.Internal, status.Code(err), "%v", err)
	list, lerr := workloadclient.ForNamespace(e.workloads, ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, lerr)
	require.Empty(t, list.Items, "the object this registration created is gone")
	require.Empty(t, allocationsOf(ctx, t, e, ns, "vm"), "the allocation is released")
}

// testRegisterDeregisterRace: a registration and a deregistration of one
// name, at once, many times. Each round ends consistent: no panic, and the
// workload either exists with exactly its allocation or does not exist and
// holds none.
func testRegisterDeregisterRace(ctx context.Context, t *testing.T, e *env) {
	const ns = "regrace"
	e.namespace(t, ctx, ns)
	createPool(ctx, t, e, "regrace", "10.202.0.0/24")
	name := "namespaces/" + ns + "/workloads/vm"
	w := &membershipv1.Workload{Name: name, AddressPool: "pools/regrace", Ready: true}
	for round := range 120 {
		var regErr, deregErr error
		var wg sync.WaitGroup
		wg.Go(func() { _, regErr = register(ctx, e, w) })
		wg.Go(func() {
			// Staggers the race with the register by round: the
			// interleaving is the test, nothing is waited for.
			time.Sleep(time.Duration(round%8) * time.Millisecond)
			_, deregErr = e.api.DeregisterWorkload(ctx, &membershipv1.DeregisterWorkloadRequest{Name: name, AllowMissing: true})
		})
		wg.Wait()
		for _, err := range []error{regErr, deregErr} {
			require.NotEqualf(t, codes.Internal, status.Code(err), "round %d: %v", round, err)
		}
		list, err := workloadclient.ForNamespace(e.workloads, ns).List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		allocs := allocationsOf(ctx, t, e, ns, "vm")
		switch len(list.Items) {
		case 0:
			require.Emptyf(t, allocs, "round %d: no workload, but an allocation is left", round)
		case 1:
			require.Lenf(t, allocs, 1, "round %d", round)
			require.Equal(t, string(list.Items[0].UID), allocs[0].GetOwner().GetUid())
		}
		_, err = e.api.DeregisterWorkload(ctx, &membershipv1.DeregisterWorkloadRequest{Name: name, AllowMissing: true})
		require.NoError(t, err)
		require.Empty(t, allocationsOf(ctx, t, e, ns, "vm"))
	}
}

// testLabelLimits: a workload's label set is bounded in count and size.
func testLabelLimits(ctx context.Context, t *testing.T, e *env) {
	const ns = "labels"
	e.namespace(t, ctx, ns)
	w := func(n, size int) *membershipv1.Workload {
		labels := map[string]string{}
		for i := range n {
			labels[fmt.Sprintf("k%05d", i)] = strings.Repeat("v", size)
		}
		return &membershipv1.Workload{Name: "namespaces/" + ns + "/workloads/vm", Labels: labels, Addresses: []string{"10.61.0.1"}}
	}
	for _, tc := range []struct {
		name    string
		w       *membershipv1.Workload
		refused bool
	}{
		{"20,000 labels", w(20000, 60), true},
		{"65 labels", w(65, 1), true},
		{"64 labels of 63 bytes", w(64, 63), false},
	} {
		_, err := register(ctx, e, tc.w)
		if !tc.refused {
			require.NoError(t, err, tc.name)
			continue
		}
		require.Equal(t, codes.InvalidArgument, status.Code(err), tc.name)
		require.Equal(t, "workload.labels", apierr.FieldViolations(err)[0].Field, tc.name)
		require.Less(t, len(err.Error()), 4096, "the error is bounded")
	}
}

// testAddressConflicts: an address a Pod uses, or one that lies in an
// allocator pool without being allocated to the workload, is refused.
func testAddressConflicts(ctx context.Context, t *testing.T, e *env) {
	const ns = "conflicts"
	e.namespace(t, ctx, ns)
	e.pod(t, ctx, ns, "web-0", map[string]string{"app": "web"}, 80)
	e.podStatus(t, ctx, ns, "web-0", "10.62.0.7", true)
	createPool(ctx, t, e, "taken", "10.203.0.0/28")

	name := "namespaces/" + ns + "/workloads/vm"
	var err error
	require.Eventually(t, func() bool {
		_, err = register(ctx, e, &membershipv1.Workload{Name: name, Addresses: []string{"10.62.0.7"}})
		return apierr.Reason(err) == "ADDRESS_IN_USE"
	}, 10*time.Second, 50*time.Millisecond, "a Pod's address was not refused: %v", err)
	require.Equal(t, codes.FailedPrecondition, status.Code(err))
	require.Contains(t, err.Error(), "Pod "+ns+"/web-0")

	_, err = register(ctx, e, &membershipv1.Workload{Name: name, Addresses: []string{"10.203.0.5"}})
	require.Equal(t, "ADDRESS_IN_POOL", apierr.Reason(err), "%v", err)

	// A workload's own address is its own: registering again is fine, and
	// another workload cannot take it.
	_, err = register(ctx, e, &membershipv1.Workload{Name: name, Addresses: []string{"10.62.0.8"}})
	require.NoError(t, err)
	_, err = register(ctx, e, &membershipv1.Workload{Name: name, Addresses: []string{"10.62.0.8"}})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err = register(ctx, e, &membershipv1.Workload{Name: "namespaces/" + ns + "/workloads/other", Addresses: []string{"10.62.0.8"}})
		return apierr.Reason(err) == "ADDRESS_IN_USE"
	}, 10*time.Second, 50*time.Millisecond, "another workload's address was not refused: %v", err)
	list, err := workloadclient.ForNamespace(e.workloads, ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, list.Items, 1, "nothing was written for the refused registrations")
}

// testPlainErrors: a registration into a namespace that does not exist says
// so (it said "workload not found"), and an allocator's refusal is passed
// on with its reason, not nested in another message.
func testPlainErrors(ctx context.Context, t *testing.T, e *env) {
	_, err := register(ctx, e, &membershipv1.Workload{Name: "namespaces/nowhere/workloads/vm", Addresses: []string{"10.63.0.1"}})
	require.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
	require.Equal(t, "NAMESPACE_NOT_FOUND", apierr.Reason(err))

	const ns = "plain"
	e.namespace(t, ctx, ns)
	createPool(ctx, t, e, "tiny", "10.204.0.0/31")
	for i := 0; ; i++ {
		_, err = register(ctx, e, &membershipv1.Workload{Name: fmt.Sprintf("namespaces/%s/workloads/vm-%d", ns, i), AddressPool: "pools/tiny"})
		if err != nil || i > 4 {
			break
		}
	}
	require.Equal(t, "POOL_EXHAUSTED", apierr.Reason(err), "%v", err)
	require.NotContains(t, status.Convert(err).Message(), "rpc error", "the allocator's status is not nested")
}

package app_test

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	repairv1 "github.com/plexusnet/plexus/api/repair/v1"
	workloadclient "github.com/plexusnet/plexus/api/workload/v1alpha1/client"
	plexusctl "github.com/plexusnet/plexus/clients/plexusctl/cmd"
	"github.com/plexusnet/plexus/internal/apierr"
	"github.com/plexusnet/plexus/internal/fleet"
	"github.com/plexusnet/plexus/internal/mcsnames"
	"github.com/plexusnet/plexus/internal/testing/proctest"
	"github.com/plexusnet/plexus/services/allocator/store/memory"
	"github.com/plexusnet/plexus/services/repair/decide"
	"github.com/plexusnet/plexus/services/repair/internal/repairtest"
)

const (
	leak          = repairv1.FindingKind_FINDING_KIND_LEAK
	ownerMismatch = repairv1.FindingKind_FINDING_KIND_OWNER_MISMATCH
	outOfRange    = repairv1.FindingKind_FINDING_KIND_OUT_OF_RANGE
	orphanedSlice = repairv1.FindingKind_FINDING_KIND_ORPHANED_SLICE
	duplicate     = repairv1.FindingKind_FINDING_KIND_DUPLICATE
	stalled       = repairv1.FindingKind_FINDING_KIND_STALLED_DELETION
)

// TestRepair runs the scenarios against one real kube-apiserver; each has
// its own namespace, allocator and repair.
func TestRepair(t *testing.T) {
	e := startKube(t)
	t.Run("strikes", func(t *testing.T) { testStrikes(t, e) })
	t.Run("owner reappears", func(t *testing.T) { testReappear(t, e) })
	t.Run("members join and leave", func(t *testing.T) { testMembers(t, e) })
	t.Run("race", func(t *testing.T) { testRace(t, e) })
	t.Run("owner recreated", func(t *testing.T) { testRecreated(t, e) })
	t.Run("unsynced", func(t *testing.T) { testUnsynced(t, e) })
	t.Run("pool shrink", func(t *testing.T) { testShrink(t, e) })
	t.Run("stalled deletion", func(t *testing.T) { testStalledDeletion(t, e) })
	t.Run("orphaned slices", func(t *testing.T) { testSlices(t, e) })
	t.Run("duplicates", func(t *testing.T) { testDuplicates(t, e) })
	t.Run("leader election", func(t *testing.T) { testLeaderElection(t, e) })
	t.Run("periodic dry run", func(t *testing.T) { testPeriodic(t, e) })
}

// testStrikes: an ExternalWorkload and a Pod deleted directly in the API
// leave leaks that are released on the third pass after their grace, not
// before; a live Pod's allocation is never touched.
func testStrikes(t *testing.T, e *kubeEnv) {
	ns := e.namespace(t)
	alloc := startAllocator(t)
	alloc.createPool(t, "wl", "10.20.0.0/24")
	alloc.createPool(t, "pods", "10.21.0.0/24")
	w := e.createWorkload(t, ns, "vm-1", "pools/wl")
	wlAlloc := alloc.allocate(t, "wl", workloadOwner(w), "")
	gone := e.createPod(t, ns, "web-0")
	podAlloc := alloc.allocate(t, "pods", podOwner(gone), "")
	live := e.createPod(t, ns, "web-1")
	liveAlloc := alloc.allocate(t, "pods", podOwner(live), "")
	e.setPodIP(t, live, liveAlloc.GetAddress())

	r := startRepair(t, e, alloc.addr, testOptions())
	rep, fs := r.run(t, false)
	require.Equal(t, repairv1.PassState_PASS_STATE_COMPLETE, rep.GetState(), rep.GetReason())
	require.Empty(t, fs, "nothing is wrong yet")
	require.EqualValues(t, 3, rep.GetAllocations())

	require.NoError(t, workloadclient.ForNamespace(e.workloads, ns).Delete(context.Background(), "vm-1", metav1.DeleteOptions{}))
	e.deletePod(t, ns, "web-0")
	r.waitFinding(t, leak, wlAlloc.GetAddress())
	r.waitFinding(t, leak, podAlloc.GetAddress())

	for pass := 1; pass <= 2; pass++ {
		rep, fs := r.run(t, false)
		require.Equal(t, repairv1.PassState_PASS_STATE_COMPLETE, rep.GetState())
		for _, a := range []*allocatorv1.Allocation{wlAlloc, podAlloc} {
			f := find(fs, leak, a.GetAddress())
			require.NotNil(t, f, "pass %d: %s", pass, a.GetAddress())
			require.EqualValues(t, pass, f.GetStrikes())
			require.Equal(t, repairv1.Action_ACTION_WAITING_STRIKES, f.GetAction(), f.GetMessage())
			require.Equal(t, a.GetEtag(), f.GetEtag())
			require.NotNil(t, alloc.get(t, a.GetPool()[len("pools/"):], a.GetAddress()), "released before its third pass")
		}
		require.Empty(t, about(fs, liveAlloc.GetAddress()))
	}

	sleepPastGrace(wlAlloc, time.Second)
	sleepPastGrace(podAlloc, time.Second)
	rep, fs = r.run(t, false)
	require.EqualValues(t, 2, rep.GetReleased(), "%v", fs)
	require.EqualValues(t, 2, rep.GetFindingsByKind()["LEAK"])
	for _, a := range []*allocatorv1.Allocation{wlAlloc, podAlloc} {
		f := find(fs, leak, a.GetAddress())
		require.NotNil(t, f)
		require.EqualValues(t, 3, f.GetStrikes())
		require.Equal(t, repairv1.Action_ACTION_RELEASED, f.GetAction(), f.GetMessage())
		require.Equal(t, a.GetName(), f.GetAllocation())
	}
	require.Nil(t, alloc.get(t, "wl", wlAlloc.GetAddress()))
	require.Nil(t, alloc.get(t, "pods", podAlloc.GetAddress()))
	require.NotNil(t, alloc.get(t, "pods", liveAlloc.GetAddress()), "a live owner's address is never freed")
	// The release is recorded where the owners were, by their uids.
	for _, uid := range []string{string(w.UID), string(gone.UID)} {
		require.Eventually(t, func() bool {
			evs, err := e.kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.uid=" + uid})
			require.NoError(t, err)
			for _, ev := range evs.Items {
				if ev.Reason == "AddressReleased" {
					return true
				}
			}
			return false
		}, 10*time.Second, 50*time.Millisecond, "no AddressReleased Event for the gone owner %s", uid)
	}

	// The leaks are gone; the next pass finds nothing.
	rep, fs = r.run(t, false)
	require.Empty(t, fs)
	require.EqualValues(t, 1, rep.GetAllocations())

	metrics := r.httpGet(t, "/metrics")
	require.Contains(t, metrics, `plexus_repair_actions_total{action="RELEASED"} 2`)
	require.Contains(t, metrics, `plexus_repair_actions_total{action="WAITING_STRIKES"} 4`)
	require.Contains(t, metrics, `plexus_repair_last_pass_state{state="COMPLETE"} 1`)
	require.Contains(t, metrics, `plexus_repair_findings{kind="LEAK"} 0`)
	require.Contains(t, metrics, "plexus_repair_pass_duration_seconds_bucket")

	// plexusctl shows the latest report and its findings.
	out := runCtl(t, r, "repair", "report")
	require.Contains(t, out, "COMPLETE")
	out = runCtl(t, r, "-o", "json", "repair", "findings", "--kind", "leak")
	require.Contains(t, out, `"pass"`)
}

// runCtl runs plexusctl against the repair and returns its output.
func runCtl(t *testing.T, r *repair, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	root := plexusctl.NewRoot(&out)
	root.SetArgs(append([]string{"--repair-addr", r.grpcAddr}, args...))
	require.NoError(t, root.ExecuteContext(context.Background()), out.String())
	return out.String()
}

// testMembers: repair follows a sources file as it changes. While the
// member that exports a clusterset service is listed, the service's VIP is
// alive; once the member leaves, the VIP is a leak candidate; when it joins
// again, alive again. Nothing restarts.
func testMembers(t *testing.T, e *kubeEnv) {
	ns := e.namespace(t)
	alloc := startAllocator(t)
	alloc.createPool(t, "vips", "10.23.0.0/24")
	vip := alloc.allocate(t, "vips", &allocatorv1.Owner{Kind: mcsnames.OwnerKindClusterSetService, Namespace: ns, Name: "db"}, "")
	src := repairtest.StartMembership(t, ns+"/db")
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	member := fleet.Member{Name: "east", Addr: src.Addr}
	edit := func(ms ...fleet.Member) {
		require.NoError(t, fleet.EditFile(path, func([]fleet.Member) ([]fleet.Member, error) { return ms, nil }))
	}
	edit(member)

	o := testOptions()
	o.SourcesFile = path
	r := startRepair(t, e, alloc.addr, o)
	require.Eventually(t, func() bool {
		rep, fs := r.run(t, true)
		return rep.GetState() == repairv1.PassState_PASS_STATE_COMPLETE && len(fs) == 0
	}, 10*time.Second, 20*time.Millisecond, "the member never synced")
	sleepPastGrace(vip, time.Second)
	_, fs := r.run(t, true)
	require.Empty(t, fs, "exported by a member: alive")

	edit() // east leaves
	r.waitFinding(t, leak, vip.GetAddress())

	edit(member) // and joins again
	require.Eventually(t, func() bool {
		rep, fs := r.run(t, true)
		return rep.GetState() == repairv1.PassState_PASS_STATE_COMPLETE && len(fs) == 0
	}, 10*time.Second, 20*time.Millisecond, "the member's export is alive again")
	require.NotNil(t, alloc.get(t, "vips", vip.GetAddress()))
}

// testReappear: a clusterset service that stops being exported is a leak
// candidate; exported again, its strikes are forgotten, and the count
// starts over when it disappears once more. It is never released.
func testReappear(t *testing.T, e *kubeEnv) {
	ns := e.namespace(t)
	alloc := startAllocator(t)
	alloc.createPool(t, "vips", "10.22.0.0/24")
	vip := alloc.allocate(t, "vips", &allocatorv1.Owner{Kind: mcsnames.OwnerKindClusterSetService, Namespace: ns, Name: "db"}, "")
	src := repairtest.StartMembership(t, ns+"/db")

	o := testOptions()
	o.Sources = []string{"east=" + src.Addr}
	r := startRepair(t, e, alloc.addr, o)
	require.Eventually(t, func() bool {
		rep, _ := r.run(t, true)
		return rep.GetState() == repairv1.PassState_PASS_STATE_COMPLETE
	}, 10*time.Second, 20*time.Millisecond, "the source never synced")
	sleepPastGrace(vip, time.Second)

	src.Set(ns+"/db", false)
	r.waitFinding(t, leak, vip.GetAddress())
	for pass := 1; pass <= 2; pass++ {
		_, fs := r.run(t, false)
		f := find(fs, leak, vip.GetAddress())
		require.NotNil(t, f)
		require.EqualValues(t, pass, f.GetStrikes())
	}

	src.Set(ns+"/db", true)
	require.Eventually(t, func() bool {
		_, fs := r.run(t, true)
		return len(fs) == 0
	}, 10*time.Second, 20*time.Millisecond)
	_, fs := r.run(t, false)
	require.Empty(t, fs, "an exported service is alive")

	src.Set(ns+"/db", false)
	r.waitFinding(t, leak, vip.GetAddress())
	_, fs = r.run(t, false)
	f := find(fs, leak, vip.GetAddress())
	require.NotNil(t, f)
	require.EqualValues(t, 1, f.GetStrikes(), "the strikes start over after the owner came back")
	require.Equal(t, repairv1.Action_ACTION_WAITING_STRIKES, f.GetAction())
	require.NotNil(t, alloc.get(t, "vips", vip.GetAddress()))

	// A ServiceImport of that name keeps it alive as well.
	_, err := e.mcs.MulticlusterV1beta1().ServiceImports(ns).Create(context.Background(), &mcsv1beta1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns},
		Spec: mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP, IPs: []string{vip.GetAddress()},
			Ports: []mcsv1beta1.ServicePort{{Port: 5432, Protocol: corev1.ProtocolTCP}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, fs := r.run(t, true)
		return len(fs) == 0
	}, 10*time.Second, 20*time.Millisecond, "the ServiceImport's own IP is no duplicate, and it keeps the VIP alive")
}

// testRace: between the pass's read and its release, the leaked address is
// released and allocated to a new owner. The guarded release is refused
// and the new owner keeps its address. A RunRepair that arrives meanwhile
// waits and, when its deadline passes, fails with PASS_IN_PROGRESS.
func testRace(t *testing.T, e *kubeEnv) {
	ns := e.namespace(t)
	alloc := startAllocator(t)
	alloc.createPool(t, "race", "10.23.0.0/24")
	old := e.createPod(t, ns, "old")
	a := alloc.allocate(t, "race", podOwner(old), "")
	successor := e.createPod(t, ns, "new")
	e.deletePod(t, ns, "old")

	var armed atomic.Bool
	var r *repair
	var hookErr atomic.Value
	var concurrent atomic.Value
	o := testOptions().WithBeforeAct(func(ctx context.Context, out *decide.Output) {
		if !armed.Swap(false) {
			return
		}
		for _, rel := range out.Releases {
			if rel.Address.String() != a.GetAddress() {
				continue
			}
			// Someone frees the address and hands it to a new Pod.
			if _, err := alloc.client.Release(ctx, &allocatorv1.ReleaseRequest{Name: a.GetName()}); err != nil {
				hookErr.Store(err)
				return
			}
			if _, err := alloc.client.Allocate(ctx, &allocatorv1.AllocateRequest{Pool: "pools/race", Owner: podOwner(successor), Address: a.GetAddress()}); err != nil {
				hookErr.Store(err)
				return
			}
		}
		cctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err := r.client.RunRepair(cctx, &repairv1.RunRepairRequest{})
		concurrent.Store(status.Convert(err))
	})
	r = startRepair(t, e, alloc.addr, o)
	r.waitFinding(t, leak, a.GetAddress())
	r.run(t, false)
	r.run(t, false)
	sleepPastGrace(a, time.Second)

	armed.Store(true)
	rep, fs := r.run(t, false)
	require.Nil(t, hookErr.Load())
	require.False(t, armed.Load(), "the pass planned no release")
	f := find(fs, leak, a.GetAddress())
	require.NotNil(t, f)
	require.Equal(t, repairv1.Action_ACTION_RELEASE_REFUSED, f.GetAction(), f.GetMessage())
	require.Contains(t, f.GetMessage(), "ETAG_MISMATCH")
	require.Zero(t, rep.GetReleased())

	now := alloc.get(t, "race", a.GetAddress())
	require.NotNil(t, now, "the address of the new owner was freed")
	require.Equal(t, string(successor.UID), now.GetOwner().GetUid())

	st, _ := concurrent.Load().(*status.Status)
	require.NotNil(t, st)
	require.Equal(t, codes.Aborted, st.Code(), st.Message())
	require.Equal(t, "PASS_IN_PROGRESS", apierr.Reason(st.Err()))

	// The new allocation is alive: nothing more to find about it.
	_, fs = r.run(t, false)
	require.Empty(t, about(fs, a.GetAddress()))
}

// testRecreated: an owner deleted and recreated under the same name has a
// new uid. Its old allocation (in another pool) is a leak and is released;
// its new one is kept. In the same pool the allocator re-binds the address
// to the new uid, and nothing is wrong.
func testRecreated(t *testing.T, e *kubeEnv) {
	ns := e.namespace(t)
	alloc := startAllocator(t)
	alloc.createPool(t, "a", "10.24.0.0/24")
	alloc.createPool(t, "b", "10.25.0.0/24")
	api1 := e.createPod(t, ns, "api")
	oldAlloc := alloc.allocate(t, "a", podOwner(api1), "")
	cache1 := e.createPod(t, ns, "cache")
	cacheAlloc := alloc.allocate(t, "a", podOwner(cache1), "")

	r := startRepair(t, e, alloc.addr, testOptions())
	e.deletePod(t, ns, "api")
	e.deletePod(t, ns, "cache")
	api2 := e.createPod(t, ns, "api")
	newAlloc := alloc.allocate(t, "b", podOwner(api2), "")
	cache2 := e.createPod(t, ns, "cache")
	rebound := alloc.allocate(t, "a", podOwner(cache2), "")
	require.Equal(t, cacheAlloc.GetAddress(), rebound.GetAddress(), "the allocator keeps the owner's address")
	require.NotEqual(t, cacheAlloc.GetEtag(), rebound.GetEtag(), "and gives it a new etag")

	r.waitFinding(t, ownerMismatch, oldAlloc.GetAddress())
	// Until its informer has seen the new cache Pod, a pass would count
	// the rebound address as a first strike of a leak: wait for it.
	require.Eventually(t, func() bool {
		_, fs := r.run(t, true)
		return len(about(fs, rebound.GetAddress())) == 0
	}, 20*time.Second, 50*time.Millisecond, "the new cache Pod reaches repair's view")
	for pass := 1; pass <= 2; pass++ {
		_, fs := r.run(t, false)
		f := find(fs, ownerMismatch, oldAlloc.GetAddress())
		require.NotNil(t, f)
		require.Equal(t, repairv1.Action_ACTION_WAITING_STRIKES, f.GetAction())
		require.Equal(t, string(api1.UID), f.GetOwner().GetUid())
		require.Empty(t, about(fs, newAlloc.GetAddress()))
		require.Empty(t, about(fs, rebound.GetAddress()))
	}
	sleepPastGrace(oldAlloc, time.Second)
	rep, fs := r.run(t, false)
	f := find(fs, ownerMismatch, oldAlloc.GetAddress())
	require.NotNil(t, f)
	require.Equal(t, repairv1.Action_ACTION_RELEASED, f.GetAction(), f.GetMessage())
	require.EqualValues(t, 1, rep.GetReleased())
	require.Nil(t, alloc.get(t, "a", oldAlloc.GetAddress()))
	require.NotNil(t, alloc.get(t, "b", newAlloc.GetAddress()))
	require.NotNil(t, alloc.get(t, "a", rebound.GetAddress()))

	// The recreated Pod carries the story as Events.
	require.Eventually(t, func() bool {
		evs, err := e.kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(api2.UID)})
		require.NoError(t, err)
		var leaked, released bool
		for _, ev := range evs.Items {
			leaked = leaked || ev.Reason == "AddressLeaked"
			released = released || ev.Reason == "AddressReleased"
		}
		return leaked && released
	}, 10*time.Second, 50*time.Millisecond, "no AddressLeaked and AddressReleased events on the recreated pod")
}

// testUnsynced: with a source that cannot be reached, no pass acts, and
// the report says why.
func testUnsynced(t *testing.T, e *kubeEnv) {
	ns := e.namespace(t)
	alloc := startAllocator(t)
	alloc.createPool(t, "p", "10.26.0.0/24")
	p := e.createPod(t, ns, "gone")
	a := alloc.allocate(t, "p", podOwner(p), "")
	e.deletePod(t, ns, "gone")

	o := testOptions()
	o.Sources = []string{"west=" + proctest.FreeAddr(t)} // nothing listens there
	r := startRepair(t, e, alloc.addr, o)
	sleepPastGrace(a, time.Second)
	r.waitFinding(t, leak, a.GetAddress())
	require.Eventually(t, func() bool {
		rep, _ := r.run(t, true)
		return strings.Contains(rep.GetReason(), "not reachable")
	}, 10*time.Second, 50*time.Millisecond, "the report never says the source is not reachable")
	for pass := 1; pass <= 4; pass++ {
		rep, fs := r.run(t, false)
		require.Equal(t, repairv1.PassState_PASS_STATE_UNSYNCED, rep.GetState())
		require.Contains(t, rep.GetReason(), "source west")
		f := find(fs, leak, a.GetAddress())
		require.NotNil(t, f)
		require.Equal(t, repairv1.Action_ACTION_REPORTED, f.GetAction())
		require.Contains(t, f.GetMessage(), "view incomplete")
		require.Zero(t, rep.GetReleased())
	}
	require.NotNil(t, alloc.get(t, "p", a.GetAddress()), "an unsynced pass released")
	require.Eventually(t, func() bool {
		return strings.Contains(r.httpGet(t, "/readyz"), "[-]sources failed: source west")
	}, 5*time.Second, 50*time.Millisecond)
	require.Contains(t, r.httpGet(t, "/metrics"), `plexus_repair_last_pass_state{state="UNSYNCED"} 1`)
}

// testShrink: a forced shrink leaves allocations out of range; they are
// reported, never released, even when their owner is gone.
func testShrink(t *testing.T, e *kubeEnv) {
	ns := e.namespace(t)
	alloc := startAllocator(t)
	alloc.createPool(t, "shrink", "10.27.0.0/24", "10.28.0.0/24")
	live := e.createPod(t, ns, "live")
	liveAlloc := alloc.allocate(t, "shrink", podOwner(live), "10.28.0.10")
	gone := e.createPod(t, ns, "gone")
	goneAlloc := alloc.allocate(t, "shrink", podOwner(gone), "10.28.0.11")
	e.deletePod(t, ns, "gone")
	resp, err := alloc.client.UpdatePool(context.Background(), &allocatorv1.UpdatePoolRequest{
		Pool:       &allocatorv1.Pool{Name: "pools/shrink", Cidrs: []string{"10.27.0.0/24"}},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"cidrs"}},
		Force:      true,
	})
	require.NoError(t, err)
	require.Len(t, resp.GetOutOfRange(), 2)

	r := startRepair(t, e, alloc.addr, testOptions())
	r.waitFinding(t, leak, goneAlloc.GetAddress())
	sleepPastGrace(goneAlloc, time.Second)
	for pass := 1; pass <= 4; pass++ {
		rep, fs := r.run(t, false)
		require.Equal(t, repairv1.PassState_PASS_STATE_COMPLETE, rep.GetState())
		require.EqualValues(t, 2, rep.GetFindingsByKind()["OUT_OF_RANGE"])
		for _, a := range []*allocatorv1.Allocation{liveAlloc, goneAlloc} {
			f := find(fs, outOfRange, a.GetAddress())
			require.NotNil(t, f)
			require.Equal(t, repairv1.Action_ACTION_REPORTED, f.GetAction())
		}
		f := find(fs, leak, goneAlloc.GetAddress())
		require.NotNil(t, f)
		require.Equal(t, repairv1.Action_ACTION_REPORTED, f.GetAction(), f.GetMessage())
		require.Contains(t, f.GetMessage(), "out of range")
		require.Zero(t, rep.GetReleased())
	}
	require.NotNil(t, alloc.get(t, "shrink", liveAlloc.GetAddress()))
	require.NotNil(t, alloc.get(t, "shrink", goneAlloc.GetAddress()))

	require.Eventually(t, func() bool {
		evs, err := e.kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(live.UID)})
		require.NoError(t, err)
		return len(evs.Items) > 0 && evs.Items[0].Reason == "AddressOutOfRange"
	}, 10*time.Second, 50*time.Millisecond)
}

// testStalledDeletion: a pool left deleting by a forced deletion cut short
// holds allocations whose Pods are gone; they are not judged as leaks. The
// first pass cannot tell a stall from a deletion under way; the next
// --leak-strikes passes see the pool hold as many, and the last of them
// finishes the deletion through the allocator.
func testStalledDeletion(t *testing.T, e *kubeEnv) {
	ns := e.namespace(t)
	st := memory.New()
	repairtest.StalledDeletion(t, st, "stalled", "10.29.0.0/24", memberCluster, ns, 50)
	a := repairtest.StartAllocatorOn(t, st)
	alloc := &allocator{addr: a.Addr, client: a.Client}
	r := startRepair(t, e, alloc.addr, testOptions())
	require.Eventually(t, func() bool {
		rep, _ := r.run(t, true)
		return rep.GetState() == repairv1.PassState_PASS_STATE_COMPLETE
	}, 20*time.Second, 50*time.Millisecond, "the view never synced")

	rep, fs := r.run(t, false)
	require.EqualValues(t, 50, rep.GetAllocations())
	require.Empty(t, fs, "the first pass: no stall seen yet, and a deleting pool's allocations are no leaks")
	for pass := 1; pass <= decide.DefaultLeakStrikes; pass++ {
		rep, fs = r.run(t, false)
		require.Len(t, fs, 1, "pass %d", pass+1)
		f := fs[0]
		require.Equal(t, stalled, f.GetKind())
		require.Equal(t, "pools/stalled", f.GetPool())
		require.EqualValues(t, pass, f.GetStrikes())
		if pass < decide.DefaultLeakStrikes {
			require.Equal(t, repairv1.Action_ACTION_WAITING_STRIKES, f.GetAction(), f.GetMessage())
			continue
		}
		require.Equal(t, repairv1.Action_ACTION_DELETED, f.GetAction(), f.GetMessage())
		require.EqualValues(t, 1, rep.GetPoolsDeleted())
	}
	_, err := alloc.client.GetPool(context.Background(), &allocatorv1.GetPoolRequest{Name: "pools/stalled"})
	require.Equal(t, "POOL_NOT_FOUND", apierr.Reason(err))
	rep, fs = r.run(t, false)
	require.Empty(t, fs)
	require.Zero(t, rep.GetAllocations())
}

// testSlices: an importer slice whose ServiceImport and derived Service
// are both gone is deleted once seen in --leak-strikes passes; one with
// either is kept; another controller's slice with the same labels is never
// touched.
func testSlices(t *testing.T, e *kubeEnv) {
	ns := e.namespace(t)
	ctx := context.Background()
	slice := func(name, managedBy, importName string) *discoveryv1.EndpointSlice {
		s, err := e.kube.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{
				mcsnames.LabelManagedBy:      managedBy,
				mcsnames.LabelServiceName:    mcsnames.DerivedServiceName(importName),
				mcsnames.LabelMCSServiceName: importName,
			}},
			AddressType: discoveryv1.AddressTypeIPv4,
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		return s
	}
	orphan := slice("gone-x1", mcsnames.ManagedBy, "gone")
	other := slice("gone-y1", "endpointslice-controller.k8s.io", "gone")
	byImport := slice("imported-x1", mcsnames.ManagedBy, "imported")
	byService := slice("derived-x1", mcsnames.ManagedBy, "derived")
	_, err := e.mcs.MulticlusterV1beta1().ServiceImports(ns).Create(ctx, &mcsv1beta1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{Name: "imported", Namespace: ns},
		Spec:       mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.Headless, Ports: []mcsv1beta1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = e.kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: mcsnames.DerivedServiceName("derived"), Namespace: ns},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	alloc := startAllocator(t)
	r := startRepair(t, e, alloc.addr, testOptions())
	name := "namespaces/" + ns + "/endpointslices/" + orphan.Name
	// Real passes count the orphan's strikes and delete nothing before the
	// third.
	require.Eventually(t, func() bool {
		_, fs := r.run(t, false)
		for _, f := range fs {
			if f.GetEndpointSlice() == name {
				require.Equal(t, repairv1.Action_ACTION_WAITING_STRIKES, f.GetAction(), f.GetMessage())
				return f.GetStrikes() == 2
			}
		}
		return false
	}, 20*time.Second, 50*time.Millisecond, "the orphan's strikes are not counted")
	require.NoError(t, getSlice(e, ns, orphan.Name), "deleted before its strikes")
	require.Eventually(t, func() bool {
		_, fs := r.run(t, true)
		for _, f := range fs {
			if f.GetEndpointSlice() == name {
				return f.GetAction() == repairv1.Action_ACTION_DRY_RUN
			}
		}
		return false
	}, 20*time.Second, 50*time.Millisecond, "the orphan is not past its grace in a dry run")
	require.NoError(t, getSlice(e, ns, orphan.Name), "a dry run deleted")

	rep, fs := r.run(t, false)
	var got []string
	for _, f := range fs {
		if strings.HasPrefix(f.GetEndpointSlice(), "namespaces/"+ns+"/") {
			require.Equal(t, orphanedSlice, f.GetKind())
			require.Equal(t, repairv1.Action_ACTION_DELETED, f.GetAction(), f.GetMessage())
			got = append(got, f.GetEndpointSlice())
		}
	}
	require.Equal(t, []string{name}, got)
	require.GreaterOrEqual(t, rep.GetSlicesDeleted(), uint64(1))
	require.True(t, apierrors.IsNotFound(getSlice(e, ns, orphan.Name)), "the orphan is still there")
	for _, s := range []*discoveryv1.EndpointSlice{other, byImport, byService} {
		require.NoError(t, getSlice(e, ns, s.Name), "%s was deleted", s.Name)
	}

	// Nothing is left to find in this namespace.
	require.Eventually(t, func() bool {
		_, fs := r.run(t, false)
		for _, f := range fs {
			if strings.HasPrefix(f.GetEndpointSlice(), "namespaces/"+ns+"/") {
				return false
			}
		}
		return true
	}, 10*time.Second, 50*time.Millisecond)
}

func getSlice(e *kubeEnv, ns, name string) error {
	_, err := e.kube.DiscoveryV1().EndpointSlices(ns).Get(context.Background(), name, metav1.GetOptions{})
	return err
}

// testLeaderElection: of two replicas on one Lease only the leader runs
// passes; the other answers NOT_LEADER naming the leader, and takes over
// when the leader stops.
func testLeaderElection(t *testing.T, e *kubeEnv) {
	ns := e.namespace(t)
	alloc := startAllocator(t)
	o := testOptions()
	o.LeaderElect = true
	o.LeaseNamespace, o.LeaseName = ns, "repair"
	o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = 3*time.Second, 2*time.Second, 200*time.Millisecond

	a := startRepair(t, e, alloc.addr, o)
	var leaderErr error
	require.Eventually(t, func() bool {
		_, leaderErr = a.client.RunRepair(context.Background(), &repairv1.RunRepairRequest{DryRun: true})
		return leaderErr == nil
	}, 15*time.Second, 50*time.Millisecond, "the first replica never led: %v", leaderErr)
	require.Contains(t, a.httpGet(t, "/metrics"), `plexus_repair_leader{identity="`+a.identity+`"} 1`)

	b := startRepair(t, e, alloc.addr, o)
	require.Eventually(t, func() bool {
		_, err := b.client.RunRepair(context.Background(), &repairv1.RunRepairRequest{})
		return apierr.Reason(err) == "NOT_LEADER" && apierr.Metadata(err)["leader"] == a.identity
	}, 10*time.Second, 50*time.Millisecond, "the follower does not name the leader")
	_, err := b.client.GetLatestReport(context.Background(), &repairv1.GetLatestReportRequest{})
	require.Equal(t, codes.NotFound, status.Code(err))
	require.Equal(t, "NO_REPORT", apierr.Reason(err))
	// Readiness checks run in the background: the next run says so.
	require.Eventually(t, func() bool { return strings.Contains(b.httpGet(t, "/readyz"), "[+]leader-election ok") },
		10*time.Second, 50*time.Millisecond, "the follower is ready once it knows the leader")

	a.stop() // releases the Lease
	require.Eventually(t, func() bool {
		_, err := b.client.RunRepair(context.Background(), &repairv1.RunRepairRequest{})
		return err == nil
	}, 10*time.Second, 50*time.Millisecond, "the follower never took over")
	rep, err := b.client.GetLatestReport(context.Background(), &repairv1.GetLatestReportRequest{})
	require.NoError(t, err)
	require.Equal(t, repairv1.PassState_PASS_STATE_COMPLETE, rep.GetReport().GetState())
}

// testDuplicates: an allocated address that is also a Service's clusterIP
// or another Pod's IP is a DUPLICATE, reported with Events on both objects
// and never released; a clusterset VIP used by its own derived Service is
// not a duplicate.
func testDuplicates(t *testing.T, e *kubeEnv) {
	ns := e.namespace(t)
	ctx := context.Background()
	svc, err := e.kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: ns},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	derived, err := e.kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: mcsnames.DerivedServiceName("shared"), Namespace: ns,
			Labels: map[string]string{mcsnames.LabelDerivedFrom: "shared"}},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	alloc := startAllocator(t)
	// A pool that (wrongly) overlaps the cluster's Service range.
	alloc.createPool(t, "overlap", "10.96.0.0/16")
	holder := e.createPod(t, ns, "holder")
	clash := alloc.allocate(t, "overlap", podOwner(holder), svc.Spec.ClusterIP)
	vip := alloc.allocate(t, "overlap", &allocatorv1.Owner{Kind: mcsnames.OwnerKindClusterSetService, Namespace: ns, Name: "shared"}, derived.Spec.ClusterIP)
	// Another Pod uses an address allocated to this one.
	owner := e.createPod(t, ns, "owner")
	taken := alloc.allocate(t, "overlap", podOwner(owner), "10.96.200.1")
	squatter := e.createPod(t, ns, "squatter")
	e.setPodIP(t, squatter, taken.GetAddress())

	src := repairtest.StartMembership(t, ns+"/shared")
	o := testOptions()
	o.Sources = []string{"east=" + src.Addr}
	r := startRepair(t, e, alloc.addr, o)
	r.waitFinding(t, duplicate, taken.GetAddress())
	require.Eventually(t, func() bool {
		rep, _ := r.run(t, true)
		return rep.GetState() == repairv1.PassState_PASS_STATE_COMPLETE
	}, 10*time.Second, 20*time.Millisecond)
	rep, fs := r.run(t, false)
	require.Equal(t, repairv1.PassState_PASS_STATE_COMPLETE, rep.GetState())

	f := find(fs, duplicate, clash.GetAddress())
	require.NotNil(t, f)
	require.Equal(t, "Service", f.GetOtherOwner().GetKind())
	require.Equal(t, "plain", f.GetOtherOwner().GetName())
	require.Equal(t, repairv1.Action_ACTION_REPORTED, f.GetAction())
	f = find(fs, duplicate, taken.GetAddress())
	require.NotNil(t, f)
	require.Equal(t, "squatter", f.GetOtherOwner().GetName())
	require.Contains(t, f.GetMessage(), "Pod.status.podIPs")
	require.Empty(t, about(fs, vip.GetAddress()), "the derived Service's clusterIP is the VIP's own use")
	require.Zero(t, rep.GetReleased())

	for _, uid := range []string{string(svc.UID), string(holder.UID), string(squatter.UID), string(owner.UID)} {
		require.Eventually(t, func() bool {
			evs, err := e.kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.uid=" + uid})
			require.NoError(t, err)
			// Other Events may be there too (a pass that ran before
			// the informer saw a Pod counts a leak strike on it).
			for _, ev := range evs.Items {
				if ev.Reason == "AddressDuplicate" && ev.Type == corev1.EventTypeWarning {
					return true
				}
			}
			return false
		}, 10*time.Second, 50*time.Millisecond, "no AddressDuplicate event on %s", uid)
	}
}

// testPeriodic: the leader runs passes every --interval on its own; with
// --dry-run they report a leak past its strikes and grace without ever
// releasing it.
func testPeriodic(t *testing.T, e *kubeEnv) {
	ns := e.namespace(t)
	alloc := startAllocator(t)
	alloc.createPool(t, "p", "10.29.0.0/24")
	p := e.createPod(t, ns, "gone")
	a := alloc.allocate(t, "p", podOwner(p), "")
	e.deletePod(t, ns, "gone")
	sleepPastGrace(a, time.Second)

	o := testOptions()
	o.Interval = 100 * time.Millisecond
	o.DryRun = true
	o.LeakStrikes = 1
	r := startRepair(t, e, alloc.addr, o)
	var last *repairv1.Report
	require.Eventually(t, func() bool {
		resp, err := r.client.GetLatestReport(context.Background(), &repairv1.GetLatestReportRequest{})
		if err != nil {
			return false
		}
		last = resp.GetReport()
		return last.GetPass() >= 5 && last.GetFindingsByKind()["LEAK"] == 1
	}, 20*time.Second, 50*time.Millisecond, "no periodic passes")
	require.True(t, last.GetDryRun())
	f := find(r.findings(t, &repairv1.ListFindingsRequest{Kind: leak}), leak, a.GetAddress())
	require.NotNil(t, f)
	require.Equal(t, repairv1.Action_ACTION_DRY_RUN, f.GetAction(), f.GetMessage())
	require.NotNil(t, alloc.get(t, "p", a.GetAddress()), "a dry run released")
}

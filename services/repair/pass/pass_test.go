package pass_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"k8s.io/client-go/tools/record"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	repairv1 "github.com/plexusnet/plexus/api/repair/v1"
	"github.com/plexusnet/plexus/internal/apierr"
	"github.com/plexusnet/plexus/services/repair/decide"
	"github.com/plexusnet/plexus/services/repair/internal/repairtest"
	"github.com/plexusnet/plexus/services/repair/pass"
)

func pod(name, uid string) decide.Owner {
	return decide.Owner{Cluster: "c", Kind: "Pod", Namespace: "ns", Name: name, UID: uid}
}

func ownerProto(o decide.Owner) *allocatorv1.Owner {
	return &allocatorv1.Owner{Cluster: o.Cluster, Kind: o.Kind, Namespace: o.Namespace, Name: o.Name, Uid: o.UID}
}

// quickConfig releases a leak on its first sighting, at any age, up to the
// whole pool: the rules stay out of the way of what a test looks at.
func quickConfig() decide.Config {
	return decide.Config{LeakStrikes: 1, MaxReleaseFraction: 1, Resolvable: []decide.Scope{{Kind: "Pod", Cluster: "c"}}}
}

func newRunner(t *testing.T, cfg decide.Config, alloc *repairtest.Allocator, view pass.View, opts ...pass.Option) *pass.Runner {
	t.Helper()
	r, err := pass.New(cfg, alloc.Client, view, opts...)
	require.NoError(t, err)
	return r
}

func createPool(t *testing.T, alloc *repairtest.Allocator, id string, cidrs ...string) {
	t.Helper()
	_, err := alloc.Client.CreatePool(context.Background(), &allocatorv1.CreatePoolRequest{PoolId: id, Pool: &allocatorv1.Pool{Cidrs: cidrs}})
	require.NoError(t, err)
}

func allocate(t *testing.T, alloc *repairtest.Allocator, pool string, o decide.Owner, addr string) *allocatorv1.Allocation {
	t.Helper()
	resp, err := alloc.Client.Allocate(context.Background(), &allocatorv1.AllocateRequest{Pool: "pools/" + pool, Owner: ownerProto(o), Address: addr})
	require.NoError(t, err)
	return resp.GetAllocation()
}

func get(t *testing.T, alloc *repairtest.Allocator, name string) *allocatorv1.Allocation {
	t.Helper()
	resp, err := alloc.Client.GetAllocation(context.Background(), &allocatorv1.GetAllocationRequest{Name: name})
	if apierr.Reason(err) == "ALLOCATION_NOT_FOUND" || apierr.Reason(err) == "POOL_NOT_FOUND" {
		return nil
	}
	require.NoError(t, err)
	return resp.GetAllocation()
}

func run(t *testing.T, r *pass.Runner, dryRun bool) *pass.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := r.Run(ctx, dryRun)
	require.NoError(t, err)
	return res
}

func findingOf(res *pass.Result, kind repairv1.FindingKind, address string) *repairv1.Finding {
	for _, f := range res.Findings {
		if f.GetKind() == kind && f.GetAddress() == address {
			return f
		}
	}
	return nil
}

// TestGuardedReleaseOutcomes changes the allocation between the pass's
// decision and its release in every way the allocator can refuse, and
// checks that only an untouched leak is freed.
func TestGuardedReleaseOutcomes(t *testing.T) {
	cases := []struct {
		name string
		// interfere changes the world after the decision; it returns the
		// owner that must hold the address afterwards (zero: nobody).
		interfere func(t *testing.T, alloc *repairtest.Allocator, a *allocatorv1.Allocation) decide.Owner
		action    repairv1.Action
		says      string
	}{
		{
			name:   "untouched leak is released",
			action: repairv1.Action_ACTION_RELEASED,
			says:   "released",
		},
		{
			name: "released and allocated to a new owner",
			interfere: func(t *testing.T, alloc *repairtest.Allocator, a *allocatorv1.Allocation) decide.Owner {
				_, err := alloc.Client.Release(context.Background(), &allocatorv1.ReleaseRequest{Name: a.GetName()})
				require.NoError(t, err)
				next := pod("next", "uid-next")
				allocate(t, alloc, "p", next, a.GetAddress())
				return next
			},
			action: repairv1.Action_ACTION_RELEASE_REFUSED,
			says:   "ETAG_MISMATCH",
		},
		{
			name: "re-bound to the recreated owner",
			interfere: func(t *testing.T, alloc *repairtest.Allocator, a *allocatorv1.Allocation) decide.Owner {
				again := pod("gone", "uid-again")
				got := allocate(t, alloc, "p", again, "")
				require.Equal(t, a.GetAddress(), got.GetAddress())
				return again
			},
			action: repairv1.Action_ACTION_RELEASE_REFUSED,
			says:   "ETAG_MISMATCH",
		},
		{
			name: "already released",
			interfere: func(t *testing.T, alloc *repairtest.Allocator, a *allocatorv1.Allocation) decide.Owner {
				_, err := alloc.Client.Release(context.Background(), &allocatorv1.ReleaseRequest{Name: a.GetName()})
				require.NoError(t, err)
				return decide.Owner{}
			},
			action: repairv1.Action_ACTION_RELEASE_REFUSED,
			says:   "ALLOCATION_NOT_FOUND",
		},
		{
			name: "pool deleted",
			interfere: func(t *testing.T, alloc *repairtest.Allocator, a *allocatorv1.Allocation) decide.Owner {
				_, err := alloc.Client.DeletePool(context.Background(), &allocatorv1.DeletePoolRequest{Name: "pools/p", Force: true})
				require.NoError(t, err)
				return decide.Owner{}
			},
			action: repairv1.Action_ACTION_RELEASE_REFUSED,
			says:   "POOL_NOT_FOUND",
		},
		{
			name: "allocator unreachable",
			interfere: func(t *testing.T, alloc *repairtest.Allocator, a *allocatorv1.Allocation) decide.Owner {
				alloc.Stop()
				return decide.Owner{}
			},
			action: repairv1.Action_ACTION_RELEASE_FAILED,
			says:   "retried by a later pass",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			alloc := repairtest.StartAllocator(t)
			createPool(t, alloc, "p", "10.0.0.0/28")
			view := repairtest.NewView()
			live := pod("live", "uid-live")
			view.AddOwner(live)
			liveAlloc := allocate(t, alloc, "p", live, "")
			a := allocate(t, alloc, "p", pod("gone", "uid-gone"), "")

			var holder decide.Owner
			hooked := false
			r := newRunner(t, quickConfig(), alloc, view, pass.WithBeforeAct(func(_ context.Context, out *decide.Output) {
				hooked = true
				require.Len(t, out.Releases, 1)
				require.Equal(t, a.GetEtag(), out.Releases[0].Etag)
				require.Equal(t, "uid-gone", out.Releases[0].OwnerUID)
				if tc.interfere != nil {
					holder = tc.interfere(t, alloc, a)
				}
			}))
			res := run(t, r, false)
			require.True(t, hooked)
			f := findingOf(res, repairv1.FindingKind_FINDING_KIND_LEAK, a.GetAddress())
			require.NotNil(t, f)
			require.Equal(t, tc.action, f.GetAction(), f.GetMessage())
			require.Contains(t, f.GetMessage(), tc.says)
			if tc.action == repairv1.Action_ACTION_RELEASED {
				require.EqualValues(t, 1, res.Report.GetReleased())
				require.Nil(t, get(t, alloc, a.GetName()))
			} else {
				require.Zero(t, res.Report.GetReleased())
			}
			if holder != (decide.Owner{}) {
				now := get(t, alloc, a.GetName())
				require.NotNil(t, now, "the address of %s was freed", holder)
				require.Equal(t, holder.UID, now.GetOwner().GetUid())
			}
			if tc.action != repairv1.Action_ACTION_RELEASE_FAILED && tc.name != "pool deleted" {
				require.NotNil(t, get(t, alloc, liveAlloc.GetName()))
			}
		})
	}
}

// TestRandomChurnNeverFreesLiveOwner interleaves, at random and at the
// worst moment (between a pass's decision and its releases), owners that
// die, addresses that are released and handed to new owners, and owners
// recreated under their old names, with passes that release every leak at
// once. Against the real allocator no live owner ever loses its address.
func TestRandomChurnNeverFreesLiveOwner(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	alloc := repairtest.StartAllocator(t)
	createPool(t, alloc, "p", "10.1.0.0/27")
	view := repairtest.NewView()

	type holding struct {
		owner decide.Owner
		addr  string
	}
	var live []holding   // owners that exist, with their address
	var leaked []holding // owners deleted, with the address they held
	seq := 0
	newOwner := func(name string) decide.Owner {
		seq++
		if name == "" {
			name = fmt.Sprintf("pod-%d", seq)
		}
		return pod(name, fmt.Sprintf("uid-%d", seq))
	}
	adopt := func(o decide.Owner, addr string) bool {
		view.AddOwner(o)
		resp, err := alloc.Client.Allocate(context.Background(), &allocatorv1.AllocateRequest{Pool: "pools/p", Owner: ownerProto(o), Address: addr})
		if err != nil {
			view.RemoveOwner(o)
			return false
		}
		live = append(live, holding{o, resp.GetAllocation().GetAddress()})
		return true
	}
	step := func() {
		switch op := rng.IntN(4); {
		case op == 0 || len(live) == 0:
			adopt(newOwner(""), "")
		case op == 1:
			i := rng.IntN(len(live))
			h := live[i]
			live = append(live[:i], live[i+1:]...)
			view.RemoveOwner(h.owner)
			leaked = append(leaked, h)
		case op == 2 && len(leaked) > 0:
			// Someone else frees a leaked address and hands it out again.
			// (Guarded by the dead owner's uid: repair may have freed
			// the address and a live owner taken it since.)
			i := rng.IntN(len(leaked))
			h := leaked[i]
			leaked = append(leaked[:i], leaked[i+1:]...)
			if _, err := alloc.Client.Release(context.Background(), &allocatorv1.ReleaseRequest{Name: "pools/p/allocations/" + h.addr, OwnerUid: h.owner.UID}); err == nil {
				adopt(newOwner(""), h.addr)
			}
		case op == 3:
			// An owner dies and comes back under its name with a new uid;
			// its allocation is re-bound to the new uid.
			i := rng.IntN(len(live))
			h := live[i]
			live = append(live[:i], live[i+1:]...)
			view.RemoveOwner(h.owner)
			adopt(newOwner(h.owner.Name), "")
		}
	}

	interleavings := 0
	r := newRunner(t, quickConfig(), alloc, view, pass.WithBeforeAct(func(context.Context, *decide.Output) {
		interleavings++
		for range rng.IntN(4) {
			step()
		}
	}))
	deadline := time.Now().Add(20 * time.Second)
	for round := 0; round < 1500 && time.Now().Before(deadline); round++ {
		for range rng.IntN(4) {
			step()
		}
		res := run(t, r, false)
		require.Equal(t, repairv1.PassState_PASS_STATE_COMPLETE, res.Report.GetState(), res.Report.GetReason())
		for _, h := range live {
			a := get(t, alloc, "pools/p/allocations/"+h.addr)
			require.NotNil(t, a, "round %d: the address %s of live %s was freed", round, h.addr, h.owner)
			require.Equal(t, h.owner.UID, a.GetOwner().GetUid(), "round %d: %s", round, h.addr)
		}
	}
	require.Greater(t, interleavings, 50, "too few passes planned a release")
	t.Logf("%d passes interleaved with churn between decision and release", interleavings)
}

// TestOnePassAtATime: a caller waits for the running pass; when its
// context ends first it gets ErrPassInProgress.
func TestOnePassAtATime(t *testing.T) {
	alloc := repairtest.StartAllocator(t)
	r := newRunner(t, quickConfig(), alloc, repairtest.NewView())
	turn, err := r.Begin(context.Background())
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = r.Run(ctx, false)
	require.ErrorIs(t, err, pass.ErrPassInProgress)

	waited := make(chan *pass.Result, 1)
	go func() {
		res, err := r.Run(context.Background(), true)
		if err == nil {
			waited <- res
		}
		close(waited)
	}()
	first := turn.Run(context.Background(), false)
	second := <-waited
	require.NotNil(t, second, "the waiting pass did not run")
	require.Equal(t, first.Report.GetPass()+1, second.Report.GetPass())
	require.Equal(t, second, r.Latest())
	require.Panics(t, func() { turn.Run(context.Background(), false) })
}

// TestViewLostDuringListing: an informer that loses its watch while the
// allocations are listed makes the pass UNSYNCED; nothing is released.
func TestViewLostDuringListing(t *testing.T) {
	alloc := repairtest.StartAllocator(t)
	createPool(t, alloc, "p", "10.2.0.0/28")
	a := allocate(t, alloc, "p", pod("gone", "uid"), "")
	view := repairtest.NewView()
	calls := 0
	view.SetSynced(func() (bool, string) {
		calls++
		if calls == 1 {
			return true, ""
		}
		return false, "informer pods: list/watch failing"
	})
	r := newRunner(t, quickConfig(), alloc, view)
	res := run(t, r, false)
	require.Equal(t, repairv1.PassState_PASS_STATE_UNSYNCED, res.Report.GetState())
	require.Equal(t, "informer pods: list/watch failing", res.Report.GetReason())
	f := findingOf(res, repairv1.FindingKind_FINDING_KIND_LEAK, a.GetAddress())
	require.NotNil(t, f)
	require.Equal(t, repairv1.Action_ACTION_REPORTED, f.GetAction())
	require.NotNil(t, get(t, alloc, a.GetName()))
}

// TestListFailureKeepsStrikes: a pass that cannot list fails, and the
// strikes counted before it are not lost.
func TestListFailureKeepsStrikes(t *testing.T) {
	alloc := repairtest.StartAllocator(t)
	createPool(t, alloc, "p", "10.3.0.0/28")
	a := allocate(t, alloc, "p", pod("gone", "uid"), "")
	reg := prometheus.NewRegistry()
	cfg := quickConfig()
	cfg.LeakStrikes = 2
	working := alloc.Client
	var down bool
	r, err := pass.New(cfg, switchable{working: working, down: &down}, repairtest.NewView(), pass.WithRegisterer(reg))
	require.NoError(t, err)

	res := run(t, r, false)
	require.EqualValues(t, 1, findingOf(res, repairv1.FindingKind_FINDING_KIND_LEAK, a.GetAddress()).GetStrikes())
	down = true
	res = run(t, r, false)
	require.Equal(t, repairv1.PassState_PASS_STATE_FAILED, res.Report.GetState())
	require.Contains(t, res.Report.GetReason(), "list pools")
	require.Empty(t, res.Findings)
	require.Equal(t, 1.0, metricValue(t, reg, "plexus_repair_last_pass_state", "FAILED"))
	down = false
	res = run(t, r, false)
	f := findingOf(res, repairv1.FindingKind_FINDING_KIND_LEAK, a.GetAddress())
	require.EqualValues(t, 2, f.GetStrikes(), "the failed pass lost the strikes")
	require.Equal(t, repairv1.Action_ACTION_RELEASED, f.GetAction())
}

// switchable is an allocator client that can be made unreachable.
type switchable struct {
	working pass.Allocator
	down    *bool
}

var errDown = errors.New("allocator down")

func (s switchable) ListPools(ctx context.Context, in *allocatorv1.ListPoolsRequest, opts ...grpc.CallOption) (*allocatorv1.ListPoolsResponse, error) {
	if *s.down {
		return nil, errDown
	}
	return s.working.ListPools(ctx, in, opts...)
}

func (s switchable) ListAllocations(ctx context.Context, in *allocatorv1.ListAllocationsRequest, opts ...grpc.CallOption) (*allocatorv1.ListAllocationsResponse, error) {
	if *s.down {
		return nil, errDown
	}
	return s.working.ListAllocations(ctx, in, opts...)
}

func (s switchable) Release(ctx context.Context, in *allocatorv1.ReleaseRequest, opts ...grpc.CallOption) (*allocatorv1.ReleaseResponse, error) {
	if *s.down {
		return nil, errDown
	}
	return s.working.Release(ctx, in, opts...)
}

func (s switchable) DeletePool(ctx context.Context, in *allocatorv1.DeletePoolRequest, opts ...grpc.CallOption) (*allocatorv1.DeletePoolResponse, error) {
	if *s.down {
		return nil, errDown
	}
	return s.working.DeletePool(ctx, in, opts...)
}

// metricValue returns the value of the sample of name whose (only) label
// has the given value, or of the unlabelled sample when label is "".
func metricValue(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if (label == "" && len(m.GetLabel()) == 0) || (len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == label) {
				if m.GetGauge() != nil {
					return m.GetGauge().GetValue()
				}
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no %s{%s}", name, label)
	return 0
}

// TestSlices: an orphaned importer slice past its grace is deleted with
// its preconditions, a young one waits, another manager's is ignored, and
// a deletion that fails is reported as such.
func TestSlices(t *testing.T) {
	alloc := repairtest.StartAllocator(t)
	view := repairtest.NewView()
	old := time.Now().Add(-time.Hour)
	view.SetSlices(
		decide.Slice{Namespace: "a", Name: "orphan", UID: "u1", ResourceVersion: "7", ManagedBy: decide.ImporterManagedBy, ServiceName: "derived-x", CreateTime: old},
		decide.Slice{Namespace: "a", Name: "fails", UID: "u2", ResourceVersion: "8", ManagedBy: decide.ImporterManagedBy, ServiceName: "derived-y", CreateTime: old},
		decide.Slice{Namespace: "a", Name: "young", UID: "u3", ResourceVersion: "9", ManagedBy: decide.ImporterManagedBy, ServiceName: "derived-z", CreateTime: time.Now()},
		decide.Slice{Namespace: "a", Name: "other", UID: "u4", ResourceVersion: "1", ManagedBy: "endpointslice-controller.k8s.io", ServiceName: "derived-x", CreateTime: old},
		decide.Slice{Namespace: "a", Name: "kept", UID: "u5", ResourceVersion: "2", ManagedBy: decide.ImporterManagedBy, ServiceName: "derived-k", CreateTime: old, ImportExists: true},
	)
	view.SetDeleteSlice(func(ref decide.SliceRef) error {
		if ref.Name == "fails" {
			return errors.New("precondition failed: resourceVersion changed")
		}
		return nil
	})
	cfg := quickConfig()
	cfg.LeakGrace = time.Minute
	rec := record.NewFakeRecorder(10)
	r := newRunner(t, cfg, alloc, view, pass.WithRecorder(rec))

	dry := run(t, r, true)
	require.Empty(t, view.Deleted(), "a dry run deleted")
	require.Len(t, dry.Findings, 3)
	require.Empty(t, rec.Events, "a dry run emitted events")

	res := run(t, r, false)
	actions := map[string]repairv1.Action{}
	for _, f := range res.Findings {
		require.Equal(t, repairv1.FindingKind_FINDING_KIND_ORPHANED_SLICE, f.GetKind())
		actions[f.GetEndpointSlice()] = f.GetAction()
	}
	require.Equal(t, map[string]repairv1.Action{
		"namespaces/a/endpointslices/orphan": repairv1.Action_ACTION_DELETED,
		"namespaces/a/endpointslices/fails":  repairv1.Action_ACTION_DELETE_FAILED,
		"namespaces/a/endpointslices/young":  repairv1.Action_ACTION_WAITING_GRACE,
	}, actions)
	require.EqualValues(t, 1, res.Report.GetSlicesDeleted())
	var deleted []string
	for _, ref := range view.Deleted() {
		deleted = append(deleted, ref.Name+"@"+ref.UID+"/"+ref.ResourceVersion)
	}
	require.ElementsMatch(t, []string{"orphan@u1/7", "fails@u2/8"}, deleted)
	require.Len(t, rec.Events, 2, "an Event for each deletion (done or failed), none for the young slice")
}

// TestGuardStopsWrites: a pass whose guard fails after its decision (the
// leader's lease is no longer fresh) sends no release and no slice
// deletion; the leak and the slice are left for a later pass.
func TestGuardStopsWrites(t *testing.T) {
	alloc := repairtest.StartAllocator(t)
	createPool(t, alloc, "p", "10.0.0.0/28")
	view := repairtest.NewView()
	a := allocate(t, alloc, "p", pod("gone", "uid-gone"), "")
	view.SetSlices(decide.Slice{Namespace: "a", Name: "orphan", UID: "u1", ResourceVersion: "7", ManagedBy: decide.ImporterManagedBy,
		ServiceName: "derived-x", CreateTime: time.Now().Add(-time.Hour)})
	var stale atomic.Bool
	r := newRunner(t, quickConfig(), alloc, view,
		pass.WithGuard(func() error {
			if stale.Load() {
				return errors.New("lease not renewed within the renew deadline")
			}
			return nil
		}),
		pass.WithBeforeAct(func(context.Context, *decide.Output) { stale.Store(true) }))

	res := run(t, r, false)
	require.Zero(t, res.Report.GetReleased())
	require.NotNil(t, get(t, alloc, a.GetName()), "the leak is still allocated")
	require.Empty(t, view.Deleted(), "no slice deletion was sent")
	leak := findingOf(res, repairv1.FindingKind_FINDING_KIND_LEAK, a.GetAddress())
	require.NotNil(t, leak)
	require.Equal(t, repairv1.Action_ACTION_RELEASE_FAILED, leak.GetAction(), leak.GetMessage())

	// Fresh again: the next pass acts.
	stale.Store(false)
	r = newRunner(t, quickConfig(), alloc, view, pass.WithGuard(func() error { return nil }))
	res = run(t, r, false)
	require.EqualValues(t, 1, res.Report.GetReleased())
	require.Len(t, view.Deleted(), 1)
}

// TestReportAndEvents checks the report's counts, the metrics, and the
// Events put on the objects that exist.
func TestReportAndEvents(t *testing.T) {
	alloc := repairtest.StartAllocator(t)
	createPool(t, alloc, "p", "10.4.0.0/28")
	view := repairtest.NewView()
	web := pod("web", "uid-web")
	view.AddOwner(web)
	webAlloc := allocate(t, alloc, "p", web, "")
	// A Service's clusterIP that is also an allocated address.
	svc := decide.Owner{Cluster: "c", Kind: "Service", Namespace: "ns", Name: "svc", UID: "uid-svc"}
	view.AddClaim(decide.Claim{Address: netip.MustParseAddr(webAlloc.GetAddress()), Owner: svc, Source: "Service.spec.clusterIPs"})
	view.AddOwner(svc) // so that it has an object for its Event
	// A recreated owner: the old incarnation's allocation is released.
	view.AddOwner(pod("api", "uid-api-2"))
	oldAPI := allocate(t, alloc, "p", pod("api", "uid-api-1"), "")
	// An owner of a kind this view cannot judge.
	other := decide.Owner{Cluster: "elsewhere", Kind: "Pod", Namespace: "ns", Name: "far", UID: "uid-far"}
	allocate(t, alloc, "p", other, "")

	reg := prometheus.NewRegistry()
	rec := record.NewFakeRecorder(10)
	r := newRunner(t, quickConfig(), alloc, view, pass.WithRecorder(rec), pass.WithRegisterer(reg))
	res := run(t, r, false)
	rep := res.Report
	require.Equal(t, repairv1.PassState_PASS_STATE_COMPLETE, rep.GetState())
	require.EqualValues(t, 3, rep.GetAllocations())
	require.EqualValues(t, 1, rep.GetUnresolved())
	require.EqualValues(t, 2, rep.GetFindings())
	require.Equal(t, map[string]uint64{"DUPLICATE": 1, "OWNER_MISMATCH": 1}, rep.GetFindingsByKind())
	require.EqualValues(t, 1, rep.GetReleased())
	dup := findingOf(res, repairv1.FindingKind_FINDING_KIND_DUPLICATE, webAlloc.GetAddress())
	require.NotNil(t, dup)
	require.Equal(t, "svc", dup.GetOtherOwner().GetName())
	require.Equal(t, webAlloc.GetName(), dup.GetAllocation())
	mm := findingOf(res, repairv1.FindingKind_FINDING_KIND_OWNER_MISMATCH, oldAPI.GetAddress())
	require.Equal(t, repairv1.Action_ACTION_RELEASED, mm.GetAction())
	require.NotNil(t, mm.GetFirstSeenTime())

	var events []string
	for len(rec.Events) > 0 {
		ev := <-rec.Events
		events = append(events, strings.Join(strings.Fields(ev)[:2], " "))
	}
	require.ElementsMatch(t, []string{"Warning AddressDuplicate", "Warning AddressDuplicate", "Normal AddressReleased"}, events)

	require.Equal(t, 1.0, metricValue(t, reg, "plexus_repair_findings", "DUPLICATE"))
	require.Equal(t, 1.0, metricValue(t, reg, "plexus_repair_actions_total", "RELEASED"))
	require.Equal(t, 1.0, metricValue(t, reg, "plexus_repair_unresolved_allocations", ""))
}

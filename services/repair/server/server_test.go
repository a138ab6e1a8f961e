package server_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	repairv1 "github.com/plexusnet/plexus/api/repair/v1"
	"github.com/plexusnet/plexus/internal/apierr"
	"github.com/plexusnet/plexus/internal/pagination"
	"github.com/plexusnet/plexus/services/repair/decide"
	"github.com/plexusnet/plexus/services/repair/internal/repairtest"
	"github.com/plexusnet/plexus/services/repair/pass"
	"github.com/plexusnet/plexus/services/repair/server"
)

// leader is a Leadership a test switches.
type leader struct {
	leads bool
	name  string
}

func (l *leader) Lead() (context.Context, string, bool) {
	if l.leads {
		return context.Background(), l.name, true
	}
	return nil, l.name, false
}

// fixture is a server over a real runner whose latest pass has 25 leaks in
// pool a, 10 in pool b and one orphaned slice.
func fixture(t *testing.T) (*server.Server, *pass.Runner, *leader) {
	t.Helper()
	alloc := repairtest.StartAllocator(t)
	for pool, n := range map[string]int{"a": 25, "b": 10} {
		_, err := alloc.Client.CreatePool(context.Background(), &allocatorv1.CreatePoolRequest{PoolId: pool, Pool: &allocatorv1.Pool{Cidrs: []string{map[string]string{"a": "10.0.0.0/24", "b": "10.1.0.0/24"}[pool]}}})
		require.NoError(t, err)
		for i := range n {
			_, err := alloc.Client.Allocate(context.Background(), &allocatorv1.AllocateRequest{Pool: "pools/" + pool,
				Owner: &allocatorv1.Owner{Cluster: "c", Kind: "Pod", Namespace: "ns", Name: fmt.Sprintf("%s-%d", pool, i), Uid: "u"}})
			require.NoError(t, err)
		}
	}
	view := repairtest.NewView()
	view.SetSlices(decide.Slice{Namespace: "ns", Name: "s", UID: "u", ResourceVersion: "1", ManagedBy: decide.ImporterManagedBy, CreateTime: time.Now()})
	cfg := decide.DefaultConfig()
	cfg.Resolvable = []decide.Scope{{Kind: "Pod", Cluster: "c"}}
	runner, err := pass.New(cfg, alloc.Client, view)
	require.NoError(t, err)
	l := &leader{leads: true, name: "me"}
	return server.New(runner, l), runner, l
}

func reasonOf(t *testing.T, err error, code codes.Code) string {
	t.Helper()
	require.Error(t, err)
	require.Equal(t, code, status.Code(err), "%v", err)
	return apierr.Reason(err)
}

func TestNoReportBeforeTheFirstPass(t *testing.T) {
	s, _, l := fixture(t)
	_, err := s.GetLatestReport(context.Background(), &repairv1.GetLatestReportRequest{})
	require.Equal(t, server.ReasonNoReport, reasonOf(t, err, codes.NotFound))
	_, err = s.ListFindings(context.Background(), &repairv1.ListFindingsRequest{})
	require.Equal(t, server.ReasonNoReport, reasonOf(t, err, codes.NotFound))

	l.leads, l.name = false, "other-replica"
	_, err = s.GetLatestReport(context.Background(), &repairv1.GetLatestReportRequest{})
	require.Equal(t, server.ReasonNoReport, reasonOf(t, err, codes.NotFound))
	require.Equal(t, "other-replica", apierr.Metadata(err)["leader"])
}

func TestRunRepairOnlyOnTheLeader(t *testing.T) {
	s, _, l := fixture(t)
	l.leads, l.name = false, "other-replica"
	_, err := s.RunRepair(context.Background(), &repairv1.RunRepairRequest{})
	require.Equal(t, server.ReasonNotLeader, reasonOf(t, err, codes.FailedPrecondition))
	require.Equal(t, "other-replica", apierr.Metadata(err)["leader"])
	require.Contains(t, err.Error(), "the leader is other-replica")

	l.leads = true
	resp, err := s.RunRepair(context.Background(), &repairv1.RunRepairRequest{DryRun: true})
	require.NoError(t, err)
	require.True(t, resp.GetReport().GetDryRun())
	require.EqualValues(t, 36, resp.GetReport().GetFindings())
	require.Equal(t, map[string]uint64{"LEAK": 35, "ORPHANED_SLICE": 1}, resp.GetReport().GetFindingsByKind())

	// A follower still serves the last report it made itself.
	l.leads = false
	got, err := s.GetLatestReport(context.Background(), &repairv1.GetLatestReportRequest{})
	require.NoError(t, err)
	require.Equal(t, resp.GetReport().GetPass(), got.GetReport().GetPass())
}

// TestRunRepairWhileAPassRuns: the caller hears PASS_IN_PROGRESS before its
// own deadline, not DEADLINE_EXCEEDED.
func TestRunRepairWhileAPassRuns(t *testing.T) {
	s, runner, _ := fixture(t)
	turn, err := runner.Begin(context.Background())
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err = s.RunRepair(ctx, &repairv1.RunRepairRequest{})
	require.Equal(t, server.ReasonPassInProgress, reasonOf(t, err, codes.Aborted))
	require.NoError(t, ctx.Err(), "the answer came after the caller's deadline")
	turn.Run(context.Background(), true)

	resp, err := s.RunRepair(context.Background(), &repairv1.RunRepairRequest{})
	require.NoError(t, err)
	require.EqualValues(t, 2, resp.GetReport().GetPass())
}

func listAll(t *testing.T, s *server.Server, req *repairv1.ListFindingsRequest) ([]*repairv1.Finding, int) {
	t.Helper()
	var out []*repairv1.Finding
	pages := 0
	for range 100 {
		resp, err := s.ListFindings(context.Background(), req)
		require.NoError(t, err)
		pages++
		out = append(out, resp.GetFindings()...)
		if resp.GetNextPageToken() == "" {
			return out, pages
		}
		require.NotEmpty(t, resp.GetFindings(), "a page before the last is empty")
		req.PageToken = resp.GetNextPageToken()
	}
	t.Fatal("no last page")
	return nil, 0
}

func TestListFindingsPages(t *testing.T) {
	s, runner, _ := fixture(t)
	_, err := runner.Run(context.Background(), true)
	require.NoError(t, err)
	cases := []struct {
		name  string
		req   *repairv1.ListFindingsRequest
		want  int
		pages int
		check func(*repairv1.Finding) bool
	}{
		{"all, default size", &repairv1.ListFindingsRequest{}, 36, 1, nil},
		{"all, pages of 7", &repairv1.ListFindingsRequest{PageSize: 7}, 36, 6, nil},
		{"all, pages of 36", &repairv1.ListFindingsRequest{PageSize: 36}, 36, 1, nil},
		{"leaks of pool b, pages of 4", &repairv1.ListFindingsRequest{Kind: repairv1.FindingKind_FINDING_KIND_LEAK, Pool: "pools/b", PageSize: 4}, 10, 3,
			func(f *repairv1.Finding) bool {
				return f.GetPool() == "pools/b" && f.GetKind() == repairv1.FindingKind_FINDING_KIND_LEAK
			}},
		{"pool a", &repairv1.ListFindingsRequest{Pool: "pools/a", PageSize: 25}, 25, 1,
			func(f *repairv1.Finding) bool { return f.GetPool() == "pools/a" }},
		{"orphaned slices", &repairv1.ListFindingsRequest{Kind: repairv1.FindingKind_FINDING_KIND_ORPHANED_SLICE, PageSize: 1}, 1, 1,
			func(f *repairv1.Finding) bool { return f.GetEndpointSlice() == "namespaces/ns/endpointslices/s" }},
		{"no match", &repairv1.ListFindingsRequest{Kind: repairv1.FindingKind_FINDING_KIND_DUPLICATE}, 0, 1, nil},
		{"unknown pool", &repairv1.ListFindingsRequest{Pool: "pools/zzz"}, 0, 1, nil},
	}
	all := runner.Latest().Findings
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, pages := listAll(t, s, tc.req)
			require.Len(t, got, tc.want)
			require.Equal(t, tc.pages, pages)
			if tc.check == nil && tc.want == len(all) {
				require.Equal(t, all, got, "pages lose or reorder findings")
			}
			for _, f := range got {
				if tc.check != nil {
					require.True(t, tc.check(f), "%v", f)
				}
			}
		})
	}
}

func TestListFindingsRejects(t *testing.T) {
	s, runner, _ := fixture(t)
	_, err := runner.Run(context.Background(), true)
	require.NoError(t, err)
	first, err := s.ListFindings(context.Background(), &repairv1.ListFindingsRequest{PageSize: 5})
	require.NoError(t, err)
	stale := first.GetNextPageToken()
	require.NotEmpty(t, stale)

	cases := []struct {
		name  string
		req   *repairv1.ListFindingsRequest
		field string
		says  string
	}{
		{"negative page size", &repairv1.ListFindingsRequest{PageSize: -1}, "page_size", "negative"},
		{"unknown kind", &repairv1.ListFindingsRequest{Kind: 99}, "kind", "unknown"},
		{"pool without prefix", &repairv1.ListFindingsRequest{Pool: "a"}, "pool", "pools/{pool_id}"},
		{"pool with a slash", &repairv1.ListFindingsRequest{Pool: "pools/a/b"}, "pool", "pools/{pool_id}"},
		{"garbage token", &repairv1.ListFindingsRequest{PageToken: "!!"}, "page_token", "invalid"},
		{"token for another filter", &repairv1.ListFindingsRequest{PageToken: stale, Pool: "pools/a"}, "page_token", "another kind or pool"},
		{"token with a negative offset", &repairv1.ListFindingsRequest{PageToken: pagination.Encode(map[string]any{"p": 1, "o": -3})}, "page_token", "invalid"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.ListFindings(context.Background(), tc.req)
			require.Equal(t, server.ReasonInvalidArgument, reasonOf(t, err, codes.InvalidArgument))
			v := apierr.FieldViolations(err)
			require.Len(t, v, 1)
			require.Equal(t, tc.field, v[0].Field)
			require.Contains(t, v[0].Description, tc.says)
		})
	}

	t.Run("token of an earlier pass", func(t *testing.T) {
		_, err := runner.Run(context.Background(), true)
		require.NoError(t, err)
		_, err = s.ListFindings(context.Background(), &repairv1.ListFindingsRequest{PageSize: 5, PageToken: stale})
		require.Equal(t, server.ReasonInvalidArgument, reasonOf(t, err, codes.InvalidArgument))
		require.Contains(t, apierr.FieldViolations(err)[0].Description, "list again from the start")
	})
}

package cmd

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	repairv1 "github.com/plexusnet/plexus/api/repair/v1"
)

// repairRunTimeout is the deadline of `repair run` when --timeout is not
// given: a pass over a large fleet takes longer than a plain call.
const repairRunTimeout = 5 * time.Minute

func reportTable(r *repairv1.Report) func() *table {
	return func() *table {
		t := &table{header: []string{"PASS", "STATE", "DRY-RUN", "ALLOCATIONS", "UNRESOLVED", "FINDINGS", "RELEASED", "SLICES-DELETED", "POOLS-DELETED", "TOOK", "REASON"}}
		var kinds []string
		for k, n := range r.GetFindingsByKind() {
			if n > 0 {
				kinds = append(kinds, fmt.Sprintf("%s=%d", k, n))
			}
		}
		slices.Sort(kinds)
		findings := fmt.Sprint(r.GetFindings())
		if len(kinds) > 0 {
			findings += " (" + strings.Join(kinds, ",") + ")"
		}
		took := r.GetEndTime().AsTime().Sub(r.GetStartTime().AsTime()).Round(time.Millisecond).String()
		t.add(fmt.Sprint(r.GetPass()), strings.TrimPrefix(r.GetState().String(), "PASS_STATE_"), fmt.Sprint(r.GetDryRun()),
			fmt.Sprint(r.GetAllocations()), fmt.Sprint(r.GetUnresolved()), findings, fmt.Sprint(r.GetReleased()),
			fmt.Sprint(r.GetSlicesDeleted()), fmt.Sprint(r.GetPoolsDeleted()), took, r.GetReason())
		return t
	}
}

func ownerString(o *allocatorv1.Owner) string {
	if o == nil || o.GetKind() == "" {
		return ""
	}
	s := o.GetKind() + "/" + o.GetName()
	if o.GetNamespace() != "" {
		s = o.GetKind() + "/" + o.GetNamespace() + "/" + o.GetName()
	}
	if o.GetCluster() != "" {
		s = o.GetCluster() + ":" + s
	}
	if o.GetUid() != "" {
		s += "(" + o.GetUid() + ")"
	}
	return s
}

func findingTable(fs ...*repairv1.Finding) func() *table {
	return func() *table {
		t := &table{header: []string{"KIND", "POOL", "ADDRESS", "OWNER", "STRIKES", "ACTION", "MESSAGE"}}
		for _, f := range fs {
			pool, addr, owner := strings.TrimPrefix(f.GetPool(), "pools/"), f.GetAddress(), ownerString(f.GetOwner())
			if f.GetEndpointSlice() != "" {
				addr = f.GetEndpointSlice()
			}
			t.add(strings.TrimPrefix(f.GetKind().String(), "FINDING_KIND_"), pool, addr, owner, fmt.Sprint(f.GetStrikes()),
				strings.TrimPrefix(f.GetAction().String(), "ACTION_"), f.GetMessage())
		}
		return t
	}
}

// parseFindingKind accepts "leak", "LEAK" or "FINDING_KIND_LEAK".
func parseFindingKind(s string) (repairv1.FindingKind, error) {
	if s == "" {
		return repairv1.FindingKind_FINDING_KIND_UNSPECIFIED, nil
	}
	name := strings.ToUpper(strings.ReplaceAll(s, "-", "_"))
	if !strings.HasPrefix(name, "FINDING_KIND_") {
		name = "FINDING_KIND_" + name
	}
	v, ok := repairv1.FindingKind_value[name]
	if !ok || v == 0 {
		var valid []string
		for n, v := range repairv1.FindingKind_value {
			if v != 0 {
				valid = append(valid, strings.ToLower(strings.TrimPrefix(n, "FINDING_KIND_")))
			}
		}
		slices.Sort(valid)
		return 0, fmt.Errorf("unknown finding kind %q (one of %s)", s, strings.Join(valid, ", "))
	}
	return repairv1.FindingKind(v), nil
}

func repairCmd(g *globals) *cobra.Command {
	c := &cobra.Command{Use: "repair", Short: "Run repair passes and read their findings"}
	var dryRun bool
	run := &cobra.Command{
		Use: "run [--dry-run]", Short: "Run a repair pass now on the leader and show its report", Args: cobra.NoArgs,
		Long: "Run a repair pass now. The call goes to the repair leader (a follower answers NOT_LEADER and names it); " +
			"if a pass is running, this one waits for it. Without --timeout the call may take " + repairRunTimeout.String() + ".",
		RunE: func(cmd *cobra.Command, _ []string) error {
			cc, err := g.conn("repair")
			if err != nil {
				return err
			}
			defer cc.Close()
			timeout := g.timeout
			if !cmd.Flags().Changed("timeout") {
				timeout = repairRunTimeout
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			resp, err := repairv1.NewRepairServiceClient(cc).RunRepair(ctx, &repairv1.RunRepairRequest{DryRun: dryRun})
			if err != nil {
				return err
			}
			return render(g.out, g.output, resp, reportTable(resp.GetReport()))
		},
	}
	run.Flags().BoolVar(&dryRun, "dry-run", false, "report what the pass would do without releasing or deleting anything (strikes are not counted)")
	report := &cobra.Command{
		Use: "report", Short: "Show the report of the latest pass", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.call(cmd, "repair", func(ctx context.Context, cc *grpc.ClientConn) error {
				resp, err := repairv1.NewRepairServiceClient(cc).GetLatestReport(ctx, &repairv1.GetLatestReportRequest{})
				if err != nil {
					return err
				}
				return render(g.out, g.output, resp, reportTable(resp.GetReport()))
			})
		},
	}
	var kind, pool string
	findings := &cobra.Command{
		Use: "findings [--kind KIND] [--pool POOL]", Short: "List the findings of the latest pass", Args: cobra.NoArgs,
		Example: "  plexusctl repair findings --kind leak --pool pods",
		RunE: func(cmd *cobra.Command, _ []string) error {
			k, err := parseFindingKind(kind)
			if err != nil {
				return err
			}
			req := &repairv1.ListFindingsRequest{Kind: k, PageSize: 1000}
			if pool != "" {
				req.Pool = poolName(pool)
			}
			return g.call(cmd, "repair", func(ctx context.Context, cc *grpc.ClientConn) error {
				client := repairv1.NewRepairServiceClient(cc)
				all := &repairv1.ListFindingsResponse{}
				for {
					resp, err := client.ListFindings(ctx, req)
					if err != nil {
						return err
					}
					if all.Pass != 0 && resp.GetPass() != all.Pass {
						return fmt.Errorf("pass %d ended while listing the findings of pass %d; list again", resp.GetPass(), all.Pass)
					}
					all.Pass = resp.GetPass()
					all.Findings = append(all.Findings, resp.GetFindings()...)
					if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
						break
					}
				}
				return render(g.out, g.output, all, findingTable(all.GetFindings()...))
			})
		},
	}
	findings.Flags().StringVar(&kind, "kind", "", "only findings of this kind: leak, duplicate, out-of-range, orphaned-slice, owner-mismatch")
	findings.Flags().StringVar(&pool, "pool", "", "only findings of this pool")
	c.AddCommand(run, report, findings)
	return c
}

package server

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	importerv1 "github.com/plexusnet/plexus/api/importer/v1"
	"github.com/plexusnet/plexus/internal/apierr"
	"github.com/plexusnet/plexus/internal/auth"
	"github.com/plexusnet/plexus/services/importer/exports"
)

// A pusher speaks only for its own cluster: a cluster-bound identity may
// push and withdraw that cluster's exports and no other's; shared and
// fleet identities may push for any until cluster identities are
// required.
func TestPushSpeaksOnlyForItsCluster(t *testing.T) {
	as := func(principal string) context.Context {
		return auth.WithPrincipal(context.Background(), principal)
	}
	vm := auth.ClusterPrincipal("plexus.test", "prod", "vm-fleet", "membership")
	cases := []struct {
		name    string
		require bool
		ctx     context.Context
		refused bool
	}{
		{name: "own cluster", ctx: as(vm)},
		{name: "own cluster, required", require: true, ctx: as(vm)},
		{name: "another cluster", ctx: as(auth.ClusterPrincipal("plexus.test", "prod", "east", "membership")), refused: true},
		{name: "another clusterset", ctx: as(auth.ClusterPrincipal("plexus.test", "staging", "vm-fleet", "membership")), refused: true},
		{name: "fleet", ctx: as(auth.FleetPrincipal("plexus.test", "prod", "operator")), require: true},
		{name: "shared", ctx: as("spiffe://plexus.test/membership")},
		{name: "shared, required", require: true, ctx: as("spiffe://plexus.test/membership"), refused: true},
		{name: "anonymous", ctx: context.Background()},
		{name: "anonymous, required", require: true, ctx: context.Background(), refused: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			store := exports.New(nil)
			var audit bytes.Buffer
			reg := prometheus.NewRegistry()
			s, err := New(Config{Imports: noImports{}, Store: store, Leader: &leadership{leading: true}, Synced: func() bool { return true },
				ClusterSet: "prod", RequireClusterIdentities: tc.require,
				Audit: slog.New(slog.NewJSONHandler(&audit, nil)), Registerer: reg})
			require.NoError(t, err)
			_, err = s.ApplyImport(tc.ctx, push("shop", "cart", "vm-fleet", "10.0.0.2", ""))
			_, werr := s.WithdrawImport(tc.ctx, &importerv1.WithdrawImportRequest{Service: "namespaces/shop/services/cart", Cluster: "vm-fleet", AllowMissing: true})
			refusals := testutil.ToFloat64(s.refusals.WithLabelValues(ReasonClusterIdentity))
			if !tc.refused {
				require.NoError(t, err)
				require.NoError(t, werr)
				require.Zero(t, refusals)
				require.Empty(t, audit.String())
				return
			}
			require.Equal(t, 2.0, refusals, "the push and the withdrawal are counted")
			require.Equal(t, 2, strings.Count(audit.String(), `"msg":"call refused"`), "each refusal is an audit line: %s", audit.String())
			require.Contains(t, audit.String(), `"reason":"CLUSTER_IDENTITY_MISMATCH"`)
			for _, e := range []error{err, werr} {
				require.Equal(t, codes.PermissionDenied, status.Code(e), "%v", e)
				require.Equal(t, ReasonClusterIdentity, apierr.Reason(e))
			}
			require.Zero(t, store.Len(), "nothing is stored")
		})
	}
}

package upgrade

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	"github.com/plexusnet/plexus/internal/auth"
	"github.com/plexusnet/plexus/internal/dial"
)

// Bearer tokens the allocators of these tests accept: fleet is an
// operator with fleet rights; clusterA and clusterB are importers bound to
// member clusters a and b, whose clusterset VIPs name them as creator.
const (
	tokenFleet    = "fleet-token"
	tokenClusterA = "cluster-a-token"
	tokenClusterB = "cluster-b-token"
)

// tokensFile writes the --auth-tokens file of the tokens above.
func tokensFile(t testing.TB) string {
	t.Helper()
	lines := fmt.Sprintf("%s,%s\n%s,%s\n%s,%s\n",
		tokenFleet, auth.FleetPrincipal("plexus.test", "cs", "operator"),
		tokenClusterA, auth.ClusterPrincipal("plexus.test", "cs", "a", "importer"),
		tokenClusterB, auth.ClusterPrincipal("plexus.test", "cs", "b", "importer"))
	p := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(p, []byte(lines), 0o600))
	return p
}

// allocClient dials addr with token (none when empty), without retries:
// a test sees every failure as it happens.
func allocClient(t testing.TB, addr, token string, opts ...dial.Option) allocatorv1.AllocatorServiceClient {
	t.Helper()
	if token != "" {
		opts = append(opts, dial.WithBearerToken(token))
	}
	conn, err := dial.New(addr, append(opts, dial.WithoutRetry())...)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return allocatorv1.NewAllocatorServiceClient(conn)
}

// storeView is what an allocator serves of its store, each message
// marshalled deterministically: the pools (with their stats, from
// GetPool) and every pool's allocations in address order, keyed by name.
type storeView struct {
	pools       map[string][]byte
	allocations map[string][]byte
	// order is the allocations' names as listed.
	order []string
}

// viewStore reads the whole store through c.
func viewStore(ctx context.Context, t testing.TB, c allocatorv1.AllocatorServiceClient) storeView {
	t.Helper()
	v := storeView{pools: map[string][]byte{}, allocations: map[string][]byte{}}
	det := proto.MarshalOptions{Deterministic: true}
	var pools []*allocatorv1.Pool
	for req := (&allocatorv1.ListPoolsRequest{PageSize: 1}); ; {
		resp, err := c.ListPools(ctx, req)
		require.NoError(t, err)
		pools = append(pools, resp.GetPools()...)
		if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
			break
		}
	}
	for _, p := range pools {
		got, err := c.GetPool(ctx, &allocatorv1.GetPoolRequest{Name: p.GetName()})
		require.NoError(t, err)
		b, err := det.Marshal(got)
		require.NoError(t, err)
		v.pools[p.GetName()] = b
		for _, a := range listAllocations(ctx, t, c, p.GetName()) {
			b, err := det.Marshal(a)
			require.NoError(t, err)
			v.allocations[a.GetName()] = b
			v.order = append(v.order, a.GetName())
		}
	}
	return v
}

// listAllocations lists every allocation of pool, in pages of 100.
func listAllocations(ctx context.Context, t testing.TB, c allocatorv1.AllocatorServiceClient, pool string) []*allocatorv1.Allocation {
	t.Helper()
	var out []*allocatorv1.Allocation
	req := &allocatorv1.ListAllocationsRequest{Pool: pool, PageSize: 100}
	for {
		resp, err := c.ListAllocations(ctx, req)
		require.NoError(t, err)
		out = append(out, resp.GetAllocations()...)
		if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
			return out
		}
	}
}

// requireSameStore fails unless two views hold the same pools and
// allocations, byte for byte, in the same order.
func requireSameStore(t testing.TB, want, got storeView, what string) {
	t.Helper()
	require.Equal(t, want.order, got.order, "%s: the allocations listed", what)
	for name, b := range want.allocations {
		require.True(t, bytes.Equal(b, got.allocations[name]), "%s: allocation %s differs", what, name)
	}
	require.Equal(t, sortedKeys(want.pools), sortedKeys(got.pools), "%s: the pools", what)
	for name, b := range want.pools {
		if !bytes.Equal(b, got.pools[name]) {
			var w, g allocatorv1.GetPoolResponse
			require.NoError(t, proto.Unmarshal(b, &w))
			require.NoError(t, proto.Unmarshal(got.pools[name], &g))
			t.Fatalf("%s: pool %s differs:\nwant %v\ngot  %v", what, name, &w, &g)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

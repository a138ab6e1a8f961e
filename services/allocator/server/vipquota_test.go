package server_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	"github.com/plexusnet/plexus/internal/certgen"
	"github.com/plexusnet/plexus/internal/config"
	"github.com/plexusnet/plexus/internal/dial"
	rt "github.com/plexusnet/plexus/internal/server"
	"github.com/plexusnet/plexus/internal/testing/servertest"
	"github.com/plexusnet/plexus/services/allocator/allocation"
	"github.com/plexusnet/plexus/services/allocator/decide"
	allocserver "github.com/plexusnet/plexus/services/allocator/server"
	"github.com/plexusnet/plexus/services/allocator/store/bolt"
)

// quotaEnv is an allocator behind mutual TLS on a bolt file it can be
// restarted on, with the certificates of member clusters a and c of
// clusterset east and of its fleet.
type quotaEnv struct {
	dir, path string
	svc       *servertest.Service
}

func startQuotaEnv(t *testing.T) *quotaEnv {
	t.Helper()
	e := &quotaEnv{dir: t.TempDir(), path: filepath.Join(t.TempDir(), "allocator.db")}
	_, err := certgen.Generate(certgen.Options{Dir: e.dir})
	require.NoError(t, err)
	for _, c := range []string{"a", "c"} {
		_, err = certgen.GenerateMember(certgen.MemberOptions{Dir: e.dir, Clusterset: "east", Cluster: c})
		require.NoError(t, err)
	}
	_, err = certgen.GenerateMember(certgen.MemberOptions{Dir: e.dir, Clusterset: "east", Fleet: true})
	require.NoError(t, err)
	e.start(t)
	return e
}

// start (re)starts the allocator on the env's bolt file.
func (e *quotaEnv) start(t *testing.T) {
	t.Helper()
	p := certgen.For(e.dir, "allocator")
	cfg := config.New(config.Allocator)
	cfg.TLSCert, cfg.TLSKey, cfg.TLSClientCA = p.Cert, p.Key, p.CA
	e.svc = servertest.Start(t, cfg, config.Allocator.Name, func(ctx context.Context, r *rt.Runtime) (func(), error) {
		st, err := bolt.Open(e.path)
		if err != nil {
			return nil, err
		}
		svc, err := allocation.New(ctx, st, allocation.WithLogger(r.Logger))
		if err != nil {
			_ = st.Close()
			return nil, err
		}
		access := decide.Access{Clusterset: "east", RequireClusterIdentities: true}
		allocserver.New(svc, nil, allocserver.WithAccess(access, r.Logger)).Register(r.Server.GRPC())
		return func() { _ = st.Close() }, nil
	})
}

// as dials the allocator with the certificate in p.
func (e *quotaEnv) as(t *testing.T, p certgen.Paths) allocatorv1.AllocatorServiceClient {
	t.Helper()
	conn, err := dial.New(e.svc.Server.GRPCAddr(), dial.WithoutRetry(), dial.WithTLSFiles(p.CA, p.Cert, p.Key))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return allocatorv1.NewAllocatorServiceClient(conn)
}

// TestVIPsCountAgainstTheirCreator: a member cluster's importer that makes
// up clusterset VIPs is held to the pool's cluster quota, so it cannot
// exhaust the pool for the others: another cluster still gets its VIP, a
// VIP c created is handed to another cluster's importer at no charge, a
// release by the fleet frees c's charge, and a restart counts the same.
func TestVIPsCountAgainstTheirCreator(t *testing.T) {
	e := startQuotaEnv(t)
	fleet := e.as(t, certgen.MemberFor(e.dir, "", "repair"))
	importerA := e.as(t, certgen.MemberFor(e.dir, "a", "importer"))
	importerC := e.as(t, certgen.MemberFor(e.dir, "c", "importer"))
	_, err := fleet.CreatePool(ctx(t), &allocatorv1.CreatePoolRequest{PoolId: "vips", Pool: &allocatorv1.Pool{Cidrs: []string{"10.97.0.0/24"}, ClusterQuota: 3}})
	require.NoError(t, err)
	vip := func(c allocatorv1.AllocatorServiceClient, name string) (*allocatorv1.AllocateResponse, error) {
		return c.Allocate(ctx(t), &allocatorv1.AllocateRequest{Pool: "pools/vips", Owner: vipOf(name)})
	}

	resp, err := vip(importerC, "made-up-0")
	require.NoError(t, err)
	require.Equal(t, "c", resp.GetAllocation().GetCreatorCluster())
	_, err = importerC.BatchAllocate(ctx(t), &allocatorv1.BatchAllocateRequest{Requests: []*allocatorv1.AllocateRequest{
		{Pool: "pools/vips", Owner: vipOf("made-up-1")}, {Pool: "pools/vips", Owner: vipOf("made-up-2")}}})
	require.NoError(t, err)
	_, err = vip(importerC, "made-up-3")
	requireStatus(t, err, codes.ResourceExhausted, "CLUSTER_QUOTA_EXCEEDED", "")
	_, err = importerC.BatchAllocate(ctx(t), &allocatorv1.BatchAllocateRequest{Requests: []*allocatorv1.AllocateRequest{
		{Pool: "pools/vips", Owner: vipOf("made-up-3")}}})
	requireStatus(t, err, codes.ResourceExhausted, "CLUSTER_QUOTA_EXCEEDED", "")

	// a is not held back; c's VIP comes back to a's importer as it is,
	// charged to c still, and charges a nothing.
	again, err := vip(importerA, "made-up-0")
	require.NoError(t, err)
	require.False(t, again.GetCreated())
	require.Equal(t, resp.GetAllocation().GetAddress(), again.GetAllocation().GetAddress())
	require.Equal(t, "c", again.GetAllocation().GetCreatorCluster())
	for i := range 3 {
		r, err := vip(importerA, fmt.Sprint("a-svc-", i))
		require.NoError(t, err, "a's VIP %d", i)
		require.Equal(t, "a", r.GetAllocation().GetCreatorCluster())
	}
	_, err = vip(importerA, "a-svc-3")
	requireStatus(t, err, codes.ResourceExhausted, "CLUSTER_QUOTA_EXCEEDED", "")

	// The fleet's own VIPs count against no cluster.
	r, err := vip(fleet, "fleet-svc")
	require.NoError(t, err)
	require.Empty(t, r.GetAllocation().GetCreatorCluster())

	// A restart counts from the store what it counted before.
	e.svc.Stop()
	e.start(t)
	fleet = e.as(t, certgen.MemberFor(e.dir, "", "repair"))
	importerA = e.as(t, certgen.MemberFor(e.dir, "a", "importer"))
	importerC = e.as(t, certgen.MemberFor(e.dir, "c", "importer"))
	_, err = vip(importerC, "made-up-3")
	requireStatus(t, err, codes.ResourceExhausted, "CLUSTER_QUOTA_EXCEEDED", "")
	_, err = vip(importerA, "a-svc-3")
	requireStatus(t, err, codes.ResourceExhausted, "CLUSTER_QUOTA_EXCEEDED", "")
	got, err := fleet.GetAllocation(ctx(t), &allocatorv1.GetAllocationRequest{Name: resp.GetAllocation().GetName()})
	require.NoError(t, err)
	require.Equal(t, "c", got.GetAllocation().GetCreatorCluster())

	// Released by the fleet, c's VIP frees c's charge, and only one.
	_, err = fleet.Release(ctx(t), &allocatorv1.ReleaseRequest{Name: resp.GetAllocation().GetName()})
	require.NoError(t, err)
	_, err = vip(importerC, "made-up-3")
	require.NoError(t, err)
	_, err = vip(importerC, "made-up-4")
	requireStatus(t, err, codes.ResourceExhausted, "CLUSTER_QUOTA_EXCEEDED", "")
}

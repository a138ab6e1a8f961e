package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	"github.com/plexusnet/plexus/internal/certgen"
	"github.com/plexusnet/plexus/internal/config"
	"github.com/plexusnet/plexus/internal/dial"
	"github.com/plexusnet/plexus/internal/mcsnames"
	rt "github.com/plexusnet/plexus/internal/server"
	"github.com/plexusnet/plexus/internal/testing/servertest"
	"github.com/plexusnet/plexus/services/allocator/allocation"
	"github.com/plexusnet/plexus/services/allocator/decide"
	allocserver "github.com/plexusnet/plexus/services/allocator/server"
	"github.com/plexusnet/plexus/services/allocator/store/bolt"
)

// syncBuffer is a log sink a test reads while the server writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// refusals returns the audit lines written so far.
func (b *syncBuffer) refusals(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(b.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), line)
		if m["msg"] == "call refused" {
			out = append(out, m)
		}
	}
	return out
}

// trustEnv is an allocator on a bolt file behind mutual TLS, and the
// certificates of a fleet: the shared ones, those of member clusters a and
// b and of the fleet of clusterset east, and cluster a's of clusterset
// west.
type trustEnv struct {
	addr, httpAddr string
	dir, westDir   string
	audit          *syncBuffer
}

func startTrust(t *testing.T, access decide.Access) *trustEnv {
	t.Helper()
	dir := t.TempDir()
	_, err := certgen.Generate(certgen.Options{Dir: dir})
	require.NoError(t, err)
	for _, c := range []string{"a", "b"} {
		_, err = certgen.GenerateMember(certgen.MemberOptions{Dir: dir, Clusterset: "east", Cluster: c})
		require.NoError(t, err)
	}
	_, err = certgen.GenerateMember(certgen.MemberOptions{Dir: dir, Clusterset: "east", Fleet: true})
	require.NoError(t, err)
	westDir := t.TempDir()
	caCert, caKey := certgen.CAFiles(dir)
	westCert, westKey := certgen.CAFiles(westDir)
	for from, to := range map[string]string{caCert: westCert, caKey: westKey} {
		data, err := os.ReadFile(from)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(to, data, 0o600))
	}
	_, err = certgen.GenerateMember(certgen.MemberOptions{Dir: westDir, Clusterset: "west", Cluster: "a"})
	require.NoError(t, err)

	server := certgen.For(dir, "allocator")
	cfg := config.New(config.Allocator)
	cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.DrainTimeout = 2 * time.Second
	cfg.TLSCert, cfg.TLSKey, cfg.TLSClientCA = server.Cert, server.Key, server.CA
	audit := &syncBuffer{}
	logger := slog.New(slog.NewJSONHandler(audit, nil))
	srv, err := rt.New(*cfg, "allocator", rt.WithLogger(logger), rt.WithoutSignalHandling(), rt.WithDrainDelay(0))
	require.NoError(t, err)
	st, err := bolt.Open(filepath.Join(t.TempDir(), "allocator.db"))
	require.NoError(t, err)
	svc, err := allocation.New(context.Background(), st, allocation.WithLogger(logger))
	require.NoError(t, err)
	allocserver.New(svc, allocserver.NewMetrics(srv.Registry(), svc), allocserver.WithAccess(access, logger)).Register(srv.GRPC())
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	servertest.Serve(t, srv)
	return &trustEnv{addr: srv.GRPCAddr(), httpAddr: srv.HTTPAddr(), dir: dir, westDir: westDir, audit: audit}
}

// as dials the allocator with the certificate in p.
func (e *trustEnv) as(t *testing.T, p certgen.Paths) allocatorv1.AllocatorServiceClient {
	t.Helper()
	conn, err := dial.New(e.addr, dial.WithoutRetry(), dial.WithTLSFiles(p.CA, p.Cert, p.Key))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return allocatorv1.NewAllocatorServiceClient(conn)
}

func owner(cluster, name string) *allocatorv1.Owner {
	return &allocatorv1.Owner{Cluster: cluster, Kind: "Pod", Namespace: "shop", Name: name, Uid: "uid-" + cluster + "-" + name}
}

func vipOf(name string) *allocatorv1.Owner {
	return &allocatorv1.Owner{Kind: mcsnames.OwnerKindClusterSetService, Namespace: "shop", Name: name}
}

// TestClusterBoundCallers: a member cluster's identity allocates, reads
// and releases only its own cluster's allocations and allocates (never
// releases) clusterset VIPs; b's every attempt on a's allocation leaves it
// as it was; each refusal is audited and counted.
func TestClusterBoundCallers(t *testing.T) {
	e := startTrust(t, decide.Access{Clusterset: "east"})
	operator := e.as(t, certgen.For(e.dir, certgen.Operator))
	a := e.as(t, certgen.MemberFor(e.dir, "a", "membership"))
	b := e.as(t, certgen.MemberFor(e.dir, "b", "membership"))
	bRepair := e.as(t, certgen.MemberFor(e.dir, "b", "repair"))
	importerB := e.as(t, certgen.MemberFor(e.dir, "b", "importer"))
	fleet := e.as(t, certgen.MemberFor(e.dir, "", "repair"))
	shared := e.as(t, certgen.For(e.dir, "membership"))
	west := e.as(t, certgen.MemberFor(e.westDir, "a", "membership"))

	_, err := operator.CreatePool(ctx(t), &allocatorv1.CreatePoolRequest{PoolId: "p", Pool: &allocatorv1.Pool{Cidrs: []string{"10.0.0.0/24"}}})
	require.NoError(t, err)

	resp, err := a.Allocate(ctx(t), &allocatorv1.AllocateRequest{Pool: "pools/p", Owner: owner("a", "web-0")})
	require.NoError(t, err)
	mine := resp.GetAllocation()
	_, err = a.Allocate(ctx(t), &allocatorv1.AllocateRequest{Pool: "pools/p", Owner: owner("b", "web-0")})
	requireStatus(t, err, codes.PermissionDenied, "OWNER_OUTSIDE_CLUSTER", "")
	theirs, err := b.Allocate(ctx(t), &allocatorv1.AllocateRequest{Pool: "pools/p", Owner: owner("b", "web-0")})
	require.NoError(t, err)
	vip, err := importerB.Allocate(ctx(t), &allocatorv1.AllocateRequest{Pool: "pools/p", Owner: vipOf("web")})
	require.NoError(t, err, "any member's importer allocates a clusterset VIP")
	_, err = a.BatchAllocate(ctx(t), &allocatorv1.BatchAllocateRequest{Requests: []*allocatorv1.AllocateRequest{
		{Pool: "pools/p", Owner: vipOf("web")}, {Pool: "pools/p", Owner: owner("b", "web-1")}}})
	requireStatus(t, err, codes.PermissionDenied, "OWNER_OUTSIDE_CLUSTER", "")

	// b's every way at a's allocation.
	attempts := []struct {
		name   string
		call   func() error
		reason string
	}{
		{"release by name", func() error {
			_, err := b.Release(ctx(t), &allocatorv1.ReleaseRequest{Name: mine.GetName()})
			return err
		}, "OWNER_OUTSIDE_CLUSTER"},
		{"release with the right etag and uid", func() error {
			_, err := bRepair.Release(ctx(t), &allocatorv1.ReleaseRequest{Name: mine.GetName(), Etag: mine.GetEtag(), OwnerUid: mine.GetOwner().GetUid()})
			return err
		}, "OWNER_OUTSIDE_CLUSTER"},
		{"release by owner", func() error {
			_, err := b.Release(ctx(t), &allocatorv1.ReleaseRequest{Pool: "pools/p", Owner: owner("a", "web-0"), AllowMissing: true})
			return err
		}, "OWNER_OUTSIDE_CLUSTER"},
		{"allocate as a's owner", func() error {
			_, err := b.Allocate(ctx(t), &allocatorv1.AllocateRequest{Pool: "pools/p", Owner: owner("a", "web-0")})
			return err
		}, "OWNER_OUTSIDE_CLUSTER"},
		{"get", func() error {
			_, err := b.GetAllocation(ctx(t), &allocatorv1.GetAllocationRequest{Name: mine.GetName()})
			return err
		}, "OWNER_OUTSIDE_CLUSTER"},
		{"list a's", func() error {
			_, err := b.ListAllocations(ctx(t), &allocatorv1.ListAllocationsRequest{Pool: "pools/-", OwnerCluster: "a"})
			return err
		}, "OWNER_OUTSIDE_CLUSTER"},
		{"watch", func() error {
			w, err := b.WatchAllocations(ctx(t), &allocatorv1.WatchAllocationsRequest{Pool: "pools/-"})
			require.NoError(t, err)
			_, err = w.Recv()
			return err
		}, "FLEET_RIGHTS_REQUIRED"},
		{"release the VIP", func() error {
			_, err := importerB.Release(ctx(t), &allocatorv1.ReleaseRequest{Name: vip.GetAllocation().GetName()})
			return err
		}, "FLEET_RIGHTS_REQUIRED"},
		{"force-delete the pool", func() error {
			_, err := bRepair.DeletePool(ctx(t), &allocatorv1.DeletePoolRequest{Name: "pools/p", Force: true})
			return err
		}, "FLEET_RIGHTS_REQUIRED"},
		{"shrink the pool", func() error {
			_, err := bRepair.UpdatePool(ctx(t), &allocatorv1.UpdatePoolRequest{Pool: &allocatorv1.Pool{Name: "pools/p", Cidrs: []string{"10.0.0.0/30"}}})
			return err
		}, "FLEET_RIGHTS_REQUIRED"},
		{"create a pool", func() error {
			_, err := bRepair.CreatePool(ctx(t), &allocatorv1.CreatePoolRequest{PoolId: "q", Pool: &allocatorv1.Pool{Cidrs: []string{"10.1.0.0/24"}}})
			return err
		}, "FLEET_RIGHTS_REQUIRED"},
		{"another clusterset", func() error {
			_, err := west.Allocate(ctx(t), &allocatorv1.AllocateRequest{Pool: "pools/p", Owner: owner("a", "web-9")})
			return err
		}, "CLUSTERSET_MISMATCH"},
	}
	for _, at := range attempts {
		requireStatus(t, at.call(), codes.PermissionDenied, at.reason, "")
	}

	// a's allocation is as it was; the VIP too.
	got, err := fleet.GetAllocation(ctx(t), &allocatorv1.GetAllocationRequest{Name: mine.GetName()})
	require.NoError(t, err)
	require.Equal(t, mine.GetEtag(), got.GetAllocation().GetEtag())
	require.Equal(t, mine.GetOwner().GetUid(), got.GetAllocation().GetOwner().GetUid())
	_, err = fleet.GetAllocation(ctx(t), &allocatorv1.GetAllocationRequest{Name: vip.GetAllocation().GetName()})
	require.NoError(t, err)

	// b lists its own and the VIPs; a reads its own and the VIP.
	list, err := b.ListAllocations(ctx(t), &allocatorv1.ListAllocationsRequest{Pool: "pools/p"})
	require.NoError(t, err)
	var names []string
	for _, al := range list.GetAllocations() {
		names = append(names, al.GetName())
	}
	require.ElementsMatch(t, []string{theirs.GetAllocation().GetName(), vip.GetAllocation().GetName()}, names)
	_, err = a.GetAllocation(ctx(t), &allocatorv1.GetAllocationRequest{Name: vip.GetAllocation().GetName()})
	require.NoError(t, err)
	all, err := shared.ListAllocations(ctx(t), &allocatorv1.ListAllocationsRequest{Pool: "pools/p"})
	require.NoError(t, err)
	require.Len(t, all.GetAllocations(), 3, "a shared identity keeps fleet rights")

	// Each refusal: one audit line naming who, what and why, and a count.
	lines := e.audit.refusals(t)
	require.Len(t, lines, 2+len(attempts))
	for i, at := range attempts {
		l := lines[2+i]
		require.Equal(t, at.reason, l["reason"], at.name)
		require.Equal(t, "INFO", l["level"])
		require.NotEmpty(t, l["method"], at.name)
		require.Contains(t, l["principal"], "spiffe://plexus.local/clusterset/", at.name)
	}
	require.Equal(t, "spiffe://plexus.local/clusterset/east/cluster/b/membership", lines[2]["principal"])
	require.Equal(t, "/plexus.allocator.v1.AllocatorService/Release", lines[2]["method"])
	require.Equal(t, "a/Pod/shop/web-0", lines[2]["owner"])
	require.Equal(t, "p", lines[2]["pool"])
	metrics := httpGet(t, "http://"+e.httpAddr+"/metrics")
	require.Contains(t, metrics, `plexus_allocator_refusals_total{reason="OWNER_OUTSIDE_CLUSTER"} 8`)
	require.Contains(t, metrics, `plexus_allocator_refusals_total{reason="FLEET_RIGHTS_REQUIRED"} 5`)
	require.Contains(t, metrics, `plexus_allocator_refusals_total{reason="CLUSTERSET_MISMATCH"} 1`)

	// What each may do: a releases its own, the fleet the VIP, the shared
	// identity b's.
	_, err = a.Release(ctx(t), &allocatorv1.ReleaseRequest{Name: mine.GetName(), Etag: mine.GetEtag()})
	require.NoError(t, err)
	_, err = fleet.Release(ctx(t), &allocatorv1.ReleaseRequest{Name: vip.GetAllocation().GetName()})
	require.NoError(t, err)
	_, err = shared.Release(ctx(t), &allocatorv1.ReleaseRequest{Name: theirs.GetAllocation().GetName()})
	require.NoError(t, err)
	w, err := fleet.WatchAllocations(ctx(t), &allocatorv1.WatchAllocationsRequest{Pool: "pools/p"})
	require.NoError(t, err)
	ev, err := w.Recv()
	require.NoError(t, err)
	require.Equal(t, allocatorv1.EventType_EVENT_TYPE_SYNCED, ev.GetType(), "a fleet identity watches; nothing is left")
}

// TestRequireClusterIdentities: at the end of a migration shared
// identities are refused; cluster-bound and fleet ones go on.
func TestRequireClusterIdentities(t *testing.T) {
	e := startTrust(t, decide.Access{Clusterset: "east", RequireClusterIdentities: true})
	operator := e.as(t, certgen.MemberFor(e.dir, "", certgen.Operator))
	_, err := operator.CreatePool(ctx(t), &allocatorv1.CreatePoolRequest{PoolId: "p", Pool: &allocatorv1.Pool{Cidrs: []string{"10.0.0.0/24"}}})
	require.NoError(t, err, "pool calls are the policy's to allow")

	shared := e.as(t, certgen.For(e.dir, "membership"))
	_, err = shared.Allocate(ctx(t), &allocatorv1.AllocateRequest{Pool: "pools/p", Owner: owner("a", "web-0")})
	requireStatus(t, err, codes.PermissionDenied, "SHARED_IDENTITY_REFUSED", "")
	_, err = e.as(t, certgen.For(e.dir, certgen.Operator)).ListAllocations(ctx(t), &allocatorv1.ListAllocationsRequest{Pool: "pools/-"})
	requireStatus(t, err, codes.PermissionDenied, "SHARED_IDENTITY_REFUSED", "")

	a := e.as(t, certgen.MemberFor(e.dir, "a", "membership"))
	resp, err := a.Allocate(ctx(t), &allocatorv1.AllocateRequest{Pool: "pools/p", Owner: owner("a", "web-0")})
	require.NoError(t, err)
	_, err = shared.Release(ctx(t), &allocatorv1.ReleaseRequest{Name: resp.GetAllocation().GetName()})
	requireStatus(t, err, codes.PermissionDenied, "SHARED_IDENTITY_REFUSED", "")
	list, err := operator.ListAllocations(ctx(t), &allocatorv1.ListAllocationsRequest{Pool: "pools/-"})
	require.NoError(t, err)
	require.Len(t, list.GetAllocations(), 1)
	require.Equal(t, resp.GetAllocation().GetEtag(), list.GetAllocations()[0].GetEtag())
	require.Len(t, e.audit.refusals(t), 3)
}

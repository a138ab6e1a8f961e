package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	"github.com/plexusnet/plexus/internal/testing/proctest"
)

// runCmd runs a binary with a deadline and returns its stdout; a failure
// shows stderr.
func runCmd(t *testing.T, bin string, args ...string) string {
	t.Helper()
	out, errOut, err := tryCmd(t, bin, args...)
	require.NoError(t, err, "%s %s\nstderr: %s", filepath.Base(bin), strings.Join(args, " "), errOut)
	return out
}

func tryCmd(t *testing.T, bin string, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = cleanEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// sameJSON checks that two JSON documents are equal as values: the same
// keys, nesting and values, whatever the spacing.
func sameJSON(t *testing.T, want, got string) {
	t.Helper()
	var w, g any
	require.NoError(t, json.Unmarshal([]byte(want), &w), want)
	require.NoError(t, json.Unmarshal([]byte(got), &g), got)
	require.Equal(t, w, g)
}

// unmarshal parses protojson strictly: an unknown field fails.
func unmarshal(t *testing.T, text string, m proto.Message) {
	t.Helper()
	require.NoError(t, protojson.Unmarshal([]byte(text), m), text)
}

func TestGrpcurlAndPlexusctl(t *testing.T) {
	grpcurl := proctest.Tool(t, "grpcurl")
	a := startAllocator(t, "--store=bolt:"+filepath.Join(t.TempDir(), "cli.db"))
	const svc = "plexus.allocator.v1.AllocatorService"
	gc := func(args ...string) string {
		return runCmd(t, grpcurl, append([]string{"-plaintext"}, args...)...)
	}
	ctl := func(args ...string) string {
		return runCmd(t, bins.plexusctl, append([]string{"--allocator-addr", a.grpcAddr, "--timeout", "10s"}, args...)...)
	}

	// Reflection: the services and the documented resource fields, with
	// no proto files at hand.
	services := strings.Fields(gc(a.grpcAddr, "list"))
	require.Contains(t, services, svc)
	require.Contains(t, services, "grpc.health.v1.Health")
	desc := gc(a.grpcAddr, "describe", "plexus.allocator.v1.Pool")
	for _, field := range []string{
		"string name = 1;", "repeated string cidrs = 2;", "repeated string reserved = 3;",
		".google.protobuf.Duration reuse_delay = 4;", "map<string, string> labels = 5;",
		"bool allow_overlap = 6;", ".plexus.allocator.v1.IPFamily family = 7;", "string etag = 8;",
		".google.protobuf.Timestamp create_time = 9;", ".google.protobuf.Timestamp update_time = 10;",
		".plexus.allocator.v1.PoolStats stats = 11;",
	} {
		require.Contains(t, desc, field)
	}
	require.Contains(t, gc(a.grpcAddr, "describe", "plexus.allocator.v1.AllocateRequest"), "string request_id = 4;")

	// grpcurl creates a pool and allocates from it.
	var created allocatorv1.CreatePoolResponse
	unmarshal(t, gc("-d", `{"pool_id":"grpcurl","pool":{"cidrs":["10.20.0.0/24"],"reserved":["10.20.0.0/28"],"labels":{"team":"net"}}}`,
		a.grpcAddr, svc+"/CreatePool"), &created)
	require.Equal(t, "pools/grpcurl", created.GetPool().GetName())
	require.Equal(t, allocatorv1.IPFamily_IP_FAMILY_IPV4, created.GetPool().GetFamily())
	require.Equal(t, "239", created.GetPool().GetStats().GetCapacity()) // 254 minus .1-.15

	var allocated allocatorv1.AllocateResponse
	unmarshal(t, gc("-d", `{"pool":"pools/grpcurl","owner":{"kind":"Pod","namespace":"default","name":"web-0","uid":"u-1"},"request_id":"r-1"}`,
		a.grpcAddr, svc+"/Allocate"), &allocated)
	require.True(t, allocated.GetCreated())
	require.Equal(t, "10.20.0.16", allocated.GetAllocation().GetAddress())
	require.Equal(t, "pools/grpcurl/allocations/10.20.0.16", allocated.GetAllocation().GetName())

	// An error shows its code and its ErrorInfo reason.
	_, errOut, err := tryCmd(t, grpcurl, "-plaintext", "-d", `{"name":"pools/missing"}`, a.grpcAddr, svc+"/GetPool")
	require.Error(t, err)
	require.Contains(t, errOut, "Code: NotFound")
	require.Contains(t, errOut, `"reason": "POOL_NOT_FOUND"`)

	// plexusctl: pools.
	var ctlPool allocatorv1.CreatePoolResponse
	unmarshal(t, ctl("pool", "create", "ctl", "--cidr", "10.30.0.0/24", "--cidr", "10.31.0.0/24", "--reserved", "10.30.0.1-10.30.0.9", "--label", "env=test", "-o", "json"), &ctlPool)
	require.Equal(t, "pools/ctl", ctlPool.GetPool().GetName())
	require.Equal(t, []string{"10.30.0.0/24", "10.31.0.0/24"}, ctlPool.GetPool().GetCidrs())
	require.Equal(t, "499", ctlPool.GetPool().GetStats().GetCapacity())
	require.Zero(t, ctlPool.GetPool().GetClusterQuota())

	// A cluster quota, set at creation and changed by an update.
	var quota allocatorv1.CreatePoolResponse
	unmarshal(t, ctl("pool", "create", "quota", "--cidr", "10.32.0.0/24", "--cluster-quota", "1", "-o", "json"), &quota)
	require.Equal(t, uint32(1), quota.GetPool().GetClusterQuota())
	ctl("alloc", "create", "quota", "--owner-cluster", "a", "--owner-kind", "Pod", "--owner-name", "p-0")
	_, errOut, err = tryCmd(t, bins.plexusctl, "--allocator-addr", a.grpcAddr, "alloc", "create", "quota", "--owner-cluster", "a", "--owner-kind", "Pod", "--owner-name", "p-1")
	require.Error(t, err)
	require.Contains(t, errOut, "[CLUSTER_QUOTA_EXCEEDED]")
	var updated allocatorv1.UpdatePoolResponse
	unmarshal(t, ctl("pool", "update", "quota", "--cluster-quota", "2", "-o", "json"), &updated)
	require.Equal(t, uint32(2), updated.GetPool().GetClusterQuota())
	require.Equal(t, []string{"10.32.0.0/24"}, updated.GetPool().GetCidrs(), "an update of the quota alone keeps the rest")
	ctl("alloc", "create", "quota", "--owner-cluster", "a", "--owner-kind", "Pod", "--owner-name", "p-1")
	ctl("pool", "delete", "quota", "--force")

	// The same call through both tools prints the same JSON document.
	sameJSON(t, gc("-d", `{"name":"pools/ctl"}`, a.grpcAddr, svc+"/GetPool"), ctl("pool", "get", "ctl", "-o", "json"))
	sameJSON(t, gc("-d", `{"page_size":1000}`, a.grpcAddr, svc+"/ListPools"), ctl("pool", "list", "-o", "json"))
	var pools allocatorv1.ListPoolsResponse
	unmarshal(t, ctl("pool", "list", "-o", "json"), &pools)
	require.Len(t, pools.GetPools(), 2)

	table := ctl("pool", "get", "ctl")
	require.Contains(t, table, "NAME")
	require.Regexp(t, `(?m)^ctl\s+IPV4\s+10.30.0.0/24,10.31.0.0/24\s+499\s+0\s+499\s+\d+\s+active$`, table)

	// plexusctl: allocations.
	var ctlAlloc allocatorv1.AllocateResponse
	unmarshal(t, ctl("alloc", "create", "ctl", "--owner-kind", "Pod", "--owner-namespace", "shop", "--owner-name", "cart-0", "--owner-uid", "u-2", "-o", "json"), &ctlAlloc)
	require.True(t, ctlAlloc.GetCreated())
	require.Equal(t, "10.30.0.10", ctlAlloc.GetAllocation().GetAddress())
	var again allocatorv1.AllocateResponse
	unmarshal(t, ctl("alloc", "create", "ctl", "--owner-kind", "Pod", "--owner-namespace", "shop", "--owner-name", "cart-0", "--owner-uid", "u-2", "-o", "json"), &again)
	require.False(t, again.GetCreated())
	require.True(t, proto.Equal(ctlAlloc.GetAllocation(), again.GetAllocation()))
	unmarshal(t, ctl("alloc", "create", "ctl", "--owner-kind", "Service", "--owner-namespace", "shop", "--owner-name", "cart", "--address", "10.31.0.7", "-o", "json"), &again)
	require.Equal(t, "10.31.0.7", again.GetAllocation().GetAddress())

	sameJSON(t, gc("-d", `{"pool":"pools/ctl","page_size":1000}`, a.grpcAddr, svc+"/ListAllocations"), ctl("alloc", "list", "ctl", "-o", "json"))
	sameJSON(t, gc("-d", `{"name":"pools/ctl/allocations/10.30.0.10"}`, a.grpcAddr, svc+"/GetAllocation"), ctl("alloc", "get", "ctl", "10.30.0.10", "-o", "json"))
	var pods allocatorv1.ListAllocationsResponse
	unmarshal(t, ctl("alloc", "list", "--owner-kind", "Pod", "-o", "json"), &pods)
	require.Len(t, pods.GetAllocations(), 2) // web-0 (grpcurl) and cart-0
	require.Contains(t, ctl("alloc", "list", "ctl"), "shop/cart-0")

	// A guarded release: the wrong uid is refused with its reason, the
	// right etag and uid release.
	_, errOut, err = tryCmd(t, bins.plexusctl, "--allocator-addr", a.grpcAddr, "alloc", "release", "ctl", "10.30.0.10", "--owner-uid", "u-other")
	require.Error(t, err)
	require.Contains(t, errOut, "[OWNER_MISMATCH]")
	var released allocatorv1.ReleaseResponse
	unmarshal(t, ctl("alloc", "release", "ctl", "10.30.0.10", "--etag", ctlAlloc.GetAllocation().GetEtag(), "--owner-uid", "u-2", "-o", "json"), &released)
	require.True(t, proto.Equal(ctlAlloc.GetAllocation(), released.GetAllocation()))
	_, errOut, err = tryCmd(t, bins.plexusctl, "--allocator-addr", a.grpcAddr, "alloc", "get", "ctl", "10.30.0.10")
	require.Error(t, err)
	require.Contains(t, errOut, "[ALLOCATION_NOT_FOUND]")

	// Release by owner, then the pool stats as grpcurl sees them.
	ctl("alloc", "release", "ctl", "--owner-kind", "Service", "--owner-namespace", "shop", "--owner-name", "cart")
	var got allocatorv1.GetPoolResponse
	unmarshal(t, gc("-d", `{"name":"pools/ctl"}`, a.grpcAddr, svc+"/GetPool"), &got)
	require.Equal(t, uint64(0), got.GetPool().GetStats().GetAllocated())

	// The YAML output holds the same document.
	yamlOut := ctl("pool", "get", "ctl", "-o", "yaml")
	require.Contains(t, yamlOut, "name: pools/ctl")
	require.Contains(t, yamlOut, "capacity: \"499\"")
}

package server_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	"github.com/plexusnet/plexus/internal/apierr"
	"github.com/plexusnet/plexus/services/allocator/decide"
	allocserver "github.com/plexusnet/plexus/services/allocator/server"
)

type client = allocatorv1.AllocatorServiceClient

// errCase is one error a caller can get: the state it needs, the call, and
// the status that must come back.
type errCase struct {
	name   string
	opts   []envOption
	setup  func(t *testing.T, e *env)
	call   func(ctx context.Context, c client) error
	code   codes.Code
	reason string
	// field, when set, must be named by a BadRequest violation.
	field string
}

// notProducible lists reasons of the error table that no test can provoke
// deterministically through the API: CONCURRENT_CHANGE only surfaces after
// the service's own retries lose to concurrent writers several times in a
// row.
var notProducible = []string{"CONCURRENT_CHANGE"}

func poolV4(cidrs ...string) *allocatorv1.Pool { return &allocatorv1.Pool{Cidrs: cidrs} }

func allocateAddr(pool string, o *allocatorv1.Owner, addr string) func(context.Context, client) error {
	return func(ctx context.Context, c client) error {
		_, err := c.Allocate(ctx, &allocatorv1.AllocateRequest{Pool: "pools/" + pool, Owner: o, Address: addr})
		return err
	}
}

func withPool(id string, p *allocatorv1.Pool, owners ...*allocatorv1.Owner) func(*testing.T, *env) {
	return func(t *testing.T, e *env) {
		e.createPool(t, id, p)
		for _, o := range owners {
			e.allocate(t, id, o)
		}
	}
}

func pageToken(json string) string { return base64.RawURLEncoding.EncodeToString([]byte(json)) }

// asCaller makes call with a bearer token of principal on an allocator
// that applies access.
func asCaller(principal string, access decide.Access, call func(context.Context, client) error) (opts []envOption, as func(context.Context, client) error) {
	return []envOption{withTokens(map[string]string{"t0k3n": principal}), withServer(allocserver.WithAccess(access, quietLogger()))},
		func(ctx context.Context, c client) error { return call(asToken(ctx, "t0k3n"), c) }
}

// accessCases are the refusals of a caller's rights (decide.Access).
func accessCases() []errCase {
	a := pod("ns", "a")
	var out []errCase
	for _, tc := range []struct {
		name, principal string
		access          decide.Access
		call            func(context.Context, client) error
		reason          string
	}{
		{"allocate for another cluster", "spiffe://plexus.local/clusterset/cs/cluster/west/membership", decide.Access{},
			allocateAddr("p", a, ""), "OWNER_OUTSIDE_CLUSTER"},
		{"watch as a member cluster", "spiffe://plexus.local/clusterset/cs/cluster/east/membership", decide.Access{},
			firstWatchError("pools/-", 0), "FLEET_RIGHTS_REQUIRED"},
		{"another clusterset", "spiffe://plexus.local/clusterset/other/cluster/east/membership", decide.Access{Clusterset: "cs"},
			allocateAddr("p", a, ""), "CLUSTERSET_MISMATCH"},
		{"shared identity once refused", "spiffe://plexus.local/membership", decide.Access{RequireClusterIdentities: true},
			allocateAddr("p", a, ""), "SHARED_IDENTITY_REFUSED"},
	} {
		opts, call := asCaller(tc.principal, tc.access, tc.call)
		setup := withPool("p", poolV4("10.0.0.0/24"))
		if tc.reason == "SHARED_IDENTITY_REFUSED" {
			setup = nil // the caller could not make the pool: it is refused everything
		}
		out = append(out, errCase{name: tc.name, opts: opts, setup: setup, call: call,
			code: codes.PermissionDenied, reason: tc.reason})
	}
	return out
}

func errorCases() []errCase {
	a, b, c := pod("ns", "a"), pod("ns", "b"), pod("ns", "c")
	var failing atomic.Bool
	failing.Store(true)
	return append(accessCases(), []errCase{
		{
			name:  "cluster quota reached",
			setup: withPool("p", &allocatorv1.Pool{Cidrs: []string{"10.0.0.0/24"}, ClusterQuota: 2}, a, b),
			call:  allocateAddr("p", c, ""),
			code:  codes.ResourceExhausted, reason: "CLUSTER_QUOTA_EXCEEDED",
		},
		{
			name:  "allocate in a pool being deleted",
			opts:  []envOption{withFailingReleases(&failing)},
			setup: deletingPool("p"),
			call:  allocateAddr("p", a, ""),
			code:  codes.FailedPrecondition, reason: "POOL_DELETING",
		},
		{
			name:  "pool exhausted",
			setup: withPool("p", poolV4("10.0.0.0/30"), a, b), // two usable addresses
			call: func(ctx context.Context, cl client) error {
				_, err := cl.Allocate(ctx, &allocatorv1.AllocateRequest{Pool: "pools/p", Owner: c})
				return err
			},
			code: codes.ResourceExhausted, reason: "POOL_EXHAUSTED",
		},
		{
			name: "address in use",
			setup: func(t *testing.T, e *env) {
				e.createPool(t, "p", poolV4("10.0.0.0/24"))
				require.NoError(t, allocateAddr("p", a, "10.0.0.5")(ctx(t), e.client))
			},
			call: allocateAddr("p", b, "10.0.0.5"),
			code: codes.AlreadyExists, reason: "ADDRESS_IN_USE",
		},
		{
			name:  "owner already holds another address",
			setup: withPool("p", poolV4("10.0.0.0/24"), a),
			call:  allocateAddr("p", a, "10.0.0.99"),
			code:  codes.AlreadyExists, reason: "ADDRESS_IN_USE",
		},
		{
			// The same rules for every way in: a batch refuses what
			// Allocate refuses.
			name:  "owner already holds another address, in a batch",
			setup: withPool("p", poolV4("10.0.0.0/24"), a),
			call: func(ctx context.Context, cl client) error {
				_, err := cl.BatchAllocate(ctx, &allocatorv1.BatchAllocateRequest{Requests: []*allocatorv1.AllocateRequest{
					{Pool: "pools/p", Owner: b}, {Pool: "pools/p", Owner: a, Address: "10.0.0.99"}}})
				return err
			},
			code: codes.AlreadyExists, reason: "ADDRESS_IN_USE",
		},
		{
			name: "address in reuse delay",
			setup: func(t *testing.T, e *env) {
				e.createPool(t, "p", &allocatorv1.Pool{Cidrs: []string{"10.0.0.0/24"}, ReuseDelay: durationpb.New(time.Hour)})
				require.NoError(t, allocateAddr("p", a, "10.0.0.5")(ctx(t), e.client))
				_, err := e.client.Release(ctx(t), &allocatorv1.ReleaseRequest{Name: "pools/p/allocations/10.0.0.5"})
				require.NoError(t, err)
			},
			call: allocateAddr("p", b, "10.0.0.5"),
			code: codes.FailedPrecondition, reason: "ADDRESS_IN_REUSE_DELAY",
		},
		{
			name:  "address out of range",
			setup: withPool("p", poolV4("10.0.0.0/24")),
			call:  allocateAddr("p", a, "10.0.1.5"),
			code:  codes.InvalidArgument, reason: "ADDRESS_OUT_OF_RANGE", field: "address",
		},
		{
			name:  "address reserved by a range",
			setup: withPool("p", &allocatorv1.Pool{Cidrs: []string{"10.0.0.0/24"}, Reserved: []string{"10.0.0.0/28"}}),
			call:  allocateAddr("p", a, "10.0.0.3"),
			code:  codes.InvalidArgument, reason: "ADDRESS_RESERVED", field: "address",
		},
		{
			name:  "network address is reserved",
			setup: withPool("p", poolV4("10.0.0.0/24")),
			call:  allocateAddr("p", a, "10.0.0.0"),
			code:  codes.InvalidArgument, reason: "ADDRESS_RESERVED", field: "address",
		},
		{
			name:  "broadcast address is reserved",
			setup: withPool("p", poolV4("10.0.0.0/24")),
			call:  allocateAddr("p", a, "10.0.0.255"),
			code:  codes.InvalidArgument, reason: "ADDRESS_RESERVED", field: "address",
		},
		{
			name:  "address of the other family",
			setup: withPool("p", poolV4("10.0.0.0/24")),
			call:  allocateAddr("p", a, "fd00::1"),
			code:  codes.InvalidArgument, reason: "ADDRESS_FAMILY_MISMATCH", field: "address",
		},
		{
			name:  "address with a leading zero",
			setup: withPool("p", poolV4("10.0.0.0/24")),
			call:  allocateAddr("p", a, "10.0.0.05"),
			code:  codes.InvalidArgument, reason: "INVALID_ADDRESS", field: "address",
		},
		{
			name:  "address with a zone",
			setup: withPool("p", poolV4("fd00::/64")),
			call:  allocateAddr("p", a, "fd00::5%eth0"),
			code:  codes.InvalidArgument, reason: "INVALID_ADDRESS", field: "address",
		},
		{
			name:  "batch: bad address names its request",
			setup: withPool("p", poolV4("10.0.0.0/24")),
			call: func(ctx context.Context, cl client) error {
				_, err := cl.BatchAllocate(ctx, &allocatorv1.BatchAllocateRequest{Requests: []*allocatorv1.AllocateRequest{
					{Pool: "pools/p", Owner: a},
					{Pool: "pools/p", Owner: b, Address: "10.9.9.9"},
				}})
				return err
			},
			code: codes.InvalidArgument, reason: "ADDRESS_OUT_OF_RANGE", field: "requests[1].address",
		},
		{
			name:  "batch: reserved address names its request",
			setup: withPool("p", poolV4("10.0.0.0/24")),
			call: func(ctx context.Context, cl client) error {
				_, err := cl.BatchAllocate(ctx, &allocatorv1.BatchAllocateRequest{Requests: []*allocatorv1.AllocateRequest{
					{Pool: "pools/p", Owner: a, Address: "10.0.0.255"},
				}})
				return err
			},
			code: codes.InvalidArgument, reason: "ADDRESS_RESERVED", field: "requests[0].address",
		},
		{
			name:  "batch: address of the other family names its request",
			setup: withPool("p", poolV4("10.0.0.0/24")),
			call: func(ctx context.Context, cl client) error {
				_, err := cl.BatchAllocate(ctx, &allocatorv1.BatchAllocateRequest{Requests: []*allocatorv1.AllocateRequest{
					{Pool: "pools/p", Owner: a}, {Pool: "pools/p", Owner: b}, {Pool: "pools/p", Owner: c, Address: "fd00::9"},
				}})
				return err
			},
			code: codes.InvalidArgument, reason: "ADDRESS_FAMILY_MISMATCH", field: "requests[2].address",
		},
		{
			name: "batch: same owner twice",
			call: func(ctx context.Context, cl client) error {
				_, err := cl.BatchAllocate(ctx, &allocatorv1.BatchAllocateRequest{Requests: []*allocatorv1.AllocateRequest{
					{Pool: "pools/p", Owner: a}, {Pool: "pools/p", Owner: a},
				}})
				return err
			},
			setup: withPool("p", poolV4("10.0.0.0/24")),
			code:  codes.InvalidArgument, reason: "DUPLICATE_OWNER", field: "requests[1].owner",
		},
		{
			name: "batch: empty",
			call: func(ctx context.Context, cl client) error {
				_, err := cl.BatchAllocate(ctx, &allocatorv1.BatchAllocateRequest{})
				return err
			},
			code: codes.InvalidArgument, reason: "EMPTY_BATCH", field: "requests",
		},
		{
			name: "batch: too large",
			call: func(ctx context.Context, cl client) error {
				reqs := make([]*allocatorv1.AllocateRequest, allocserver.MaxBatch+1)
				for i := range reqs {
					reqs[i] = &allocatorv1.AllocateRequest{Pool: "pools/p", Owner: a}
				}
				_, err := cl.BatchAllocate(ctx, &allocatorv1.BatchAllocateRequest{Requests: reqs})
				return err
			},
			code: codes.InvalidArgument, reason: "BATCH_TOO_LARGE", field: "requests",
		},
		{
			name: "CIDR with host bits",
			call: createPool("p", poolV4("10.0.0.1/24")),
			code: codes.InvalidArgument, reason: "INVALID_CIDR", field: "pool.cidrs[0]",
		},
		{
			name: "CIDR with a leading zero",
			call: createPool("p", poolV4("10.0.0.0/24", "010.1.0.0/16")),
			code: codes.InvalidArgument, reason: "INVALID_CIDR", field: "pool.cidrs[1]",
		},
		{
			name: "IPv4-mapped IPv6 CIDR",
			call: createPool("p", poolV4("::ffff:10.0.0.0/104")),
			code: codes.InvalidArgument, reason: "INVALID_CIDR", field: "pool.cidrs[0]",
		},
		{
			name: "prefix length too long",
			call: createPool("p", poolV4("10.0.0.0/33")),
			code: codes.InvalidArgument, reason: "INVALID_CIDR", field: "pool.cidrs[0]",
		},
		{
			name: "CIDRs of two families",
			call: createPool("p", poolV4("10.0.0.0/24", "fd00::/64")),
			code: codes.InvalidArgument, reason: "ADDRESS_FAMILY_MISMATCH", field: "pool.cidrs[1]",
		},
		{
			name: "reserved range of the other family",
			call: createPool("p", &allocatorv1.Pool{Cidrs: []string{"10.0.0.0/24"}, Reserved: []string{"fd00::1"}}),
			code: codes.InvalidArgument, reason: "ADDRESS_FAMILY_MISMATCH", field: "pool.reserved[0]",
		},
		{
			name: "malformed reserved range",
			call: createPool("p", &allocatorv1.Pool{Cidrs: []string{"10.0.0.0/24"}, Reserved: []string{"10.0.0.9-10.0.0.1"}}),
			code: codes.InvalidArgument, reason: "INVALID_RANGE", field: "pool.reserved[0]",
		},
		{
			name: "more CIDRs than a pool holds",
			call: func(ctx context.Context, cl client) error {
				cidrs := make([]string, decide.MaxPoolCIDRs+1)
				for i := range cidrs {
					cidrs[i] = fmt.Sprintf("10.%d.0.0/16", i)
				}
				return createPool("p", poolV4(cidrs...))(ctx, cl)
			},
			code: codes.InvalidArgument, reason: "TOO_MANY_CIDRS", field: "pool.cidrs",
		},
		{
			name: "pool without CIDRs",
			call: createPool("p", &allocatorv1.Pool{}),
			code: codes.InvalidArgument, reason: "REQUIRED", field: "pool.cidrs",
		},
		{
			name: "create without a pool",
			call: func(ctx context.Context, cl client) error {
				_, err := cl.CreatePool(ctx, &allocatorv1.CreatePoolRequest{PoolId: "p"})
				return err
			},
			code: codes.InvalidArgument, reason: "REQUIRED", field: "pool",
		},
		{
			name: "negative reuse delay",
			call: createPool("p", &allocatorv1.Pool{Cidrs: []string{"10.0.0.0/24"}, ReuseDelay: durationpb.New(-time.Second)}),
			code: codes.InvalidArgument, reason: "INVALID_DURATION", field: "pool.reuse_delay",
		},
		{
			name: "invalid pool id",
			call: createPool("Not_A_Label", poolV4("10.0.0.0/24")),
			code: codes.InvalidArgument, reason: "INVALID_POOL_ID", field: "pool_id",
		},
		{
			name:  "pools overlap",
			setup: withPool("p", poolV4("10.0.0.0/16")),
			call:  createPool("q", poolV4("10.0.1.0/24")),
			code:  codes.FailedPrecondition, reason: "POOL_OVERLAP",
		},
		{
			name: "pool grows into another",
			setup: func(t *testing.T, e *env) {
				e.createPool(t, "p", poolV4("10.0.0.0/24"))
				e.createPool(t, "q", poolV4("10.1.0.0/24"))
			},
			call: func(ctx context.Context, cl client) error {
				_, err := cl.UpdatePool(ctx, &allocatorv1.UpdatePoolRequest{
					Pool:       &allocatorv1.Pool{Name: "pools/q", Cidrs: []string{"10.1.0.0/24", "10.0.0.128/25"}},
					UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"cidrs"}},
				})
				return err
			},
			code: codes.FailedPrecondition, reason: "POOL_OVERLAP",
		},
		{
			name: "loopback pool",
			call: createPool("p", poolV4("10.0.0.0/24", "127.0.0.0/28")),
			code: codes.InvalidArgument, reason: "LOCAL_RANGE", field: "pool.cidrs[1]",
		},
		{
			name: "link-local pool",
			call: createPool("p", poolV4("169.254.0.0/24")),
			code: codes.InvalidArgument, reason: "LOCAL_RANGE", field: "pool.cidrs[0]",
		},
		{
			name: "IPv6 link-local pool",
			call: createPool("p", &allocatorv1.Pool{Cidrs: []string{"fe80::/64"}}),
			code: codes.InvalidArgument, reason: "LOCAL_RANGE", field: "pool.cidrs[0]",
		},
		{
			name: "a supernet of the unspecified range",
			call: createPool("p", poolV4("0.0.0.0/4")),
			code: codes.InvalidArgument, reason: "LOCAL_RANGE", field: "pool.cidrs[0]",
		},
		{
			name:  "pool grows into loopback",
			setup: withPool("p", poolV4("10.0.0.0/24")),
			call: func(ctx context.Context, cl client) error {
				_, err := cl.UpdatePool(ctx, &allocatorv1.UpdatePoolRequest{
					Pool:       &allocatorv1.Pool{Name: "pools/p", Cidrs: []string{"10.0.0.0/24", "127.0.0.0/28"}},
					UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"cidrs"}},
				})
				return err
			},
			code: codes.InvalidArgument, reason: "LOCAL_RANGE", field: "pool.cidrs[1]",
		},
		{
			name:  "pool exists",
			setup: withPool("p", poolV4("10.0.0.0/24")),
			call:  createPool("p", poolV4("10.0.0.0/24")),
			code:  codes.AlreadyExists, reason: "POOL_ALREADY_EXISTS",
		},
		{
			name: "get missing pool",
			call: func(ctx context.Context, cl client) error {
				_, err := cl.GetPool(ctx, &allocatorv1.GetPoolRequest{Name: "pools/nope"})
				return err
			},
			code: codes.NotFound, reason: "POOL_NOT_FOUND",
		},
		{
			name: "allocate in missing pool",
			call: allocateAddr("nope", a, ""),
			code: codes.NotFound, reason: "POOL_NOT_FOUND",
		},
		{
			name: "list allocations of missing pool",
			call: func(ctx context.Context, cl client) error {
				_, err := cl.ListAllocations(ctx, &allocatorv1.ListAllocationsRequest{Pool: "pools/nope"})
				return err
			},
			code: codes.NotFound, reason: "POOL_NOT_FOUND",
		},
		{
			name: "watch missing pool",
			call: firstWatchError("pools/nope", 0),
			code: codes.NotFound, reason: "POOL_NOT_FOUND",
		},
		{
			name: "delete missing pool",
			call: func(ctx context.Context, cl client) error {
				_, err := cl.DeletePool(ctx, &allocatorv1.DeletePoolRequest{Name: "pools/nope"})
				return err
			},
			code: codes.NotFound, reason: "POOL_NOT_FOUND",
		},
		{
			name:  "delete pool holding allocations",
			setup: withPool("p", poolV4("10.0.0.0/24"), a),
			call: func(ctx context.Context, cl client) error {
				_, err := cl.DeletePool(ctx, &allocatorv1.DeletePoolRequest{Name: "pools/p"})
				return err
			},
			code: codes.FailedPrecondition, reason: "POOL_NOT_EMPTY",
		},
		{
			name: "delete pool at a stale etag",
			setup: func(t *testing.T, e *env) {
				e.createPool(t, "p", poolV4("10.0.0.0/24"))
				_, err := e.client.UpdatePool(ctx(t), &allocatorv1.UpdatePoolRequest{
					Pool:       &allocatorv1.Pool{Name: "pools/p", Labels: map[string]string{"x": "y"}},
					UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"labels"}},
				})
				require.NoError(t, err)
			},
			call: func(ctx context.Context, cl client) error {
				_, err := cl.DeletePool(ctx, &allocatorv1.DeletePoolRequest{Name: "pools/p", Etag: "1"})
				return err
			},
			code: codes.FailedPrecondition, reason: "ETAG_MISMATCH",
		},
		{
			name: "remove a CIDR holding allocations",
			setup: func(t *testing.T, e *env) {
				e.createPool(t, "p", poolV4("10.0.0.0/24", "10.0.1.0/24"))
				require.NoError(t, allocateAddr("p", a, "10.0.1.7")(ctx(t), e.client))
			},
			call: func(ctx context.Context, cl client) error {
				_, err := cl.UpdatePool(ctx, &allocatorv1.UpdatePoolRequest{
					Pool:       &allocatorv1.Pool{Name: "pools/p", Cidrs: []string{"10.0.0.0/24"}},
					UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"cidrs"}},
				})
				return err
			},
			code: codes.FailedPrecondition, reason: "CIDR_IN_USE",
		},
		{
			name:  "update pool at a stale etag",
			setup: withPool("p", poolV4("10.0.0.0/24")),
			call: func(ctx context.Context, cl client) error {
				_, err := cl.UpdatePool(ctx, &allocatorv1.UpdatePoolRequest{
					Pool:       &allocatorv1.Pool{Name: "pools/p", Etag: "12345", Labels: map[string]string{"a": "b"}},
					UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"labels"}},
				})
				return err
			},
			code: codes.FailedPrecondition, reason: "ETAG_MISMATCH",
		},
		{
			name:  "update of a field that cannot change",
			setup: withPool("p", poolV4("10.0.0.0/24")),
			call: func(ctx context.Context, cl client) error {
				_, err := cl.UpdatePool(ctx, &allocatorv1.UpdatePoolRequest{
					Pool:       &allocatorv1.Pool{Name: "pools/p"},
					UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"family"}},
				})
				return err
			},
			code: codes.InvalidArgument, reason: "INVALID_UPDATE_MASK", field: "update_mask",
		},
		{
			name:  "release at a stale etag",
			setup: withPool("p", poolV4("10.0.0.0/24"), a),
			call: func(ctx context.Context, cl client) error {
				_, err := cl.Release(ctx, &allocatorv1.ReleaseRequest{Name: "pools/p/allocations/10.0.0.1", Etag: "999999"})
				return err
			},
			code: codes.FailedPrecondition, reason: "ETAG_MISMATCH",
		},
		{
			name:  "release held by another uid",
			setup: withPool("p", poolV4("10.0.0.0/24"), a),
			call: func(ctx context.Context, cl client) error {
				_, err := cl.Release(ctx, &allocatorv1.ReleaseRequest{Name: "pools/p/allocations/10.0.0.1", OwnerUid: "someone-else"})
				return err
			},
			code: codes.FailedPrecondition, reason: "OWNER_MISMATCH",
		},
		{
			name:  "release by owner held by another uid",
			setup: withPool("p", poolV4("10.0.0.0/24"), a),
			call: func(ctx context.Context, cl client) error {
				_, err := cl.Release(ctx, &allocatorv1.ReleaseRequest{Pool: "pools/p", Owner: a, OwnerUid: "recreated-pod"})
				return err
			},
			code: codes.FailedPrecondition, reason: "OWNER_MISMATCH",
		},
		{
			name:  "release of a free address",
			setup: withPool("p", poolV4("10.0.0.0/24"), a),
			call: func(ctx context.Context, cl client) error {
				_, err := cl.Release(ctx, &allocatorv1.ReleaseRequest{Name: "pools/p/allocations/10.0.0.77"})
				return err
			},
			code: codes.NotFound, reason: "ALLOCATION_NOT_FOUND",
		},
		{
			name:  "release by an owner that holds nothing",
			setup: withPool("p", poolV4("10.0.0.0/24"), a),
			call: func(ctx context.Context, cl client) error {
				_, err := cl.Release(ctx, &allocatorv1.ReleaseRequest{Pool: "pools/p", Owner: b})
				return err
			},
			code: codes.NotFound, reason: "ALLOCATION_NOT_FOUND",
		},
		{
			name:  "get a free address",
			setup: withPool("p", poolV4("10.0.0.0/24")),
			call: func(ctx context.Context, cl client) error {
				_, err := cl.GetAllocation(ctx, &allocatorv1.GetAllocationRequest{Name: "pools/p/allocations/10.0.0.1"})
				return err
			},
			code: codes.NotFound, reason: "ALLOCATION_NOT_FOUND",
		},
		{
			name: "release without a target",
			call: func(ctx context.Context, cl client) error {
				_, err := cl.Release(ctx, &allocatorv1.ReleaseRequest{Pool: "pools/p"})
				return err
			},
			code: codes.InvalidArgument, reason: "REQUIRED", field: "name",
		},
		{
			name:  "watch from a compacted revision",
			opts:  []envOption{withHistory(4)},
			setup: withPool("p", poolV4("10.0.0.0/24"), pod("w", "0"), pod("w", "1"), pod("w", "2"), pod("w", "3"), pod("w", "4"), pod("w", "5")),
			call:  firstWatchError("pools/p", 1),
			code:  codes.OutOfRange, reason: "REVISION_TOO_OLD",
		},
		{
			name:  "a watch that reads too slowly",
			opts:  []envOption{withHistory(slowHistory), withFixedWindow()},
			setup: withPool("p", poolV4("10.0.0.0/16")),
			call: func(ctx context.Context, cl client) error {
				_, err := slowWatch(ctx, cl)
				return err
			},
			code: codes.ResourceExhausted, reason: "WATCH_TOO_SLOW",
		},
		{
			name:  "watch from a revision the store has not reached",
			setup: withPool("p", poolV4("10.0.0.0/24"), pod("w", "0")),
			call:  firstWatchError("pools/p", 1<<40),
			code:  codes.OutOfRange, reason: "REVISION_IN_FUTURE",
		},
		{
			name: "read while the shared store cannot be reached",
			opts: []envOption{withSharedStore(func(context.Context) (int64, error) { return 0, errors.New("connection refused") })},
			call: func(ctx context.Context, cl client) error {
				_, err := cl.ListPools(ctx, &allocatorv1.ListPoolsRequest{})
				return err
			},
			code: codes.Unavailable, reason: "STORE_UNAVAILABLE",
		},
		{
			name: "read while this replica has not applied the store's latest commit",
			opts: []envOption{withSharedStore(func(context.Context) (int64, error) { return 1 << 40, nil })},
			call: func(ctx context.Context, cl client) error {
				_, err := cl.GetAllocation(ctx, &allocatorv1.GetAllocationRequest{Name: "pools/p/allocations/10.0.0.1"})
				return err
			},
			code: codes.Unavailable, reason: "REPLICA_BEHIND",
		},
		{
			name: "negative start revision",
			call: firstWatchError("pools/-", -1),
			code: codes.InvalidArgument, reason: "INVALID_REVISION", field: "start_revision",
		},
		{
			name: "request id reused for another owner",
			setup: func(t *testing.T, e *env) {
				e.createPool(t, "p", poolV4("10.0.0.0/24"))
				_, err := e.client.Allocate(ctx(t), &allocatorv1.AllocateRequest{Pool: "pools/p", Owner: a, RequestId: "req-1"})
				require.NoError(t, err)
			},
			call: func(ctx context.Context, cl client) error {
				_, err := cl.Allocate(ctx, &allocatorv1.AllocateRequest{Pool: "pools/p", Owner: b, RequestId: "req-1"})
				return err
			},
			code: codes.InvalidArgument, reason: "REQUEST_ID_REUSED",
		},
		{
			name: "request id reused for a batch of another size",
			setup: func(t *testing.T, e *env) {
				e.createPool(t, "p", poolV4("10.0.0.0/24"))
				_, err := e.client.Allocate(ctx(t), &allocatorv1.AllocateRequest{Pool: "pools/p", Owner: a, RequestId: "req-1"})
				require.NoError(t, err)
			},
			call: func(ctx context.Context, cl client) error {
				_, err := cl.BatchAllocate(ctx, &allocatorv1.BatchAllocateRequest{RequestId: "req-1", Requests: []*allocatorv1.AllocateRequest{
					{Pool: "pools/p", Owner: a}, {Pool: "pools/p", Owner: b},
				}})
				return err
			},
			code: codes.InvalidArgument, reason: "REQUEST_ID_REUSED",
		},
		{
			name:  "owner without a kind",
			setup: withPool("p", poolV4("10.0.0.0/24")),
			call:  allocateAddr("p", &allocatorv1.Owner{Name: "x"}, ""),
			code:  codes.InvalidArgument, reason: "REQUIRED", field: "owner.kind",
		},
		{
			name:  "owner name with a slash",
			setup: withPool("p", poolV4("10.0.0.0/24")),
			call:  allocateAddr("p", &allocatorv1.Owner{Kind: "Pod", Name: "a/b"}, ""),
			code:  codes.InvalidArgument, reason: "INVALID_OWNER", field: "owner.name",
		},
		{
			name: "request id too long",
			call: func(ctx context.Context, cl client) error {
				_, err := cl.Allocate(ctx, &allocatorv1.AllocateRequest{Pool: "pools/p", Owner: a, RequestId: strings.Repeat("r", 129)})
				return err
			},
			code: codes.InvalidArgument, reason: "INVALID_REQUEST_ID", field: "request_id",
		},
		{
			name: "pool name without the collection",
			call: func(ctx context.Context, cl client) error {
				_, err := cl.GetPool(ctx, &allocatorv1.GetPoolRequest{Name: "p"})
				return err
			},
			code: codes.InvalidArgument, reason: "INVALID_NAME", field: "name",
		},
		{
			name: "pool name with an invalid id",
			call: func(ctx context.Context, cl client) error {
				_, err := cl.GetPool(ctx, &allocatorv1.GetPoolRequest{Name: "pools/UPPER"})
				return err
			},
			code: codes.InvalidArgument, reason: "INVALID_POOL_ID", field: "name",
		},
		{
			name: "allocation name of another collection",
			call: func(ctx context.Context, cl client) error {
				_, err := cl.GetAllocation(ctx, &allocatorv1.GetAllocationRequest{Name: "pools/p/addresses/10.0.0.1"})
				return err
			},
			code: codes.InvalidArgument, reason: "INVALID_NAME", field: "name",
		},
		{
			name: "allocation name with a bad address",
			call: func(ctx context.Context, cl client) error {
				_, err := cl.Release(ctx, &allocatorv1.ReleaseRequest{Name: "pools/p/allocations/10.0.0.01"})
				return err
			},
			code: codes.InvalidArgument, reason: "INVALID_ADDRESS", field: "name",
		},
		{
			name: "allocate with a pool that is not a name",
			call: allocateAddr("", a, ""),
			code: codes.InvalidArgument, reason: "INVALID_POOL_ID", field: "pool",
		},
		{
			name: "list pools with a garbage page token",
			call: func(ctx context.Context, cl client) error {
				_, err := cl.ListPools(ctx, &allocatorv1.ListPoolsRequest{PageToken: "not a token!"})
				return err
			},
			code: codes.InvalidArgument, reason: "INVALID_PAGE_TOKEN", field: "page_token",
		},
		{
			name:  "list allocations with a token that is not JSON",
			setup: withPool("p", poolV4("10.0.0.0/24")),
			call: func(ctx context.Context, cl client) error {
				_, err := cl.ListAllocations(ctx, &allocatorv1.ListAllocationsRequest{Pool: "pools/p", PageToken: pageToken("not json")})
				return err
			},
			code: codes.InvalidArgument, reason: "INVALID_PAGE_TOKEN", field: "page_token",
		},
		{
			name:  "list allocations with a token holding a bad address",
			setup: withPool("p", poolV4("10.0.0.0/24")),
			call: func(ctx context.Context, cl client) error {
				_, err := cl.ListAllocations(ctx, &allocatorv1.ListAllocationsRequest{Pool: "pools/p", PageToken: pageToken(`{"p":"p","a":"10.0.0.300"}`)})
				return err
			},
			code: codes.InvalidArgument, reason: "INVALID_PAGE_TOKEN", field: "page_token",
		},
		{
			name: "negative page size",
			call: func(ctx context.Context, cl client) error {
				_, err := cl.ListAllocations(ctx, &allocatorv1.ListAllocationsRequest{Pool: "pools/-", PageSize: -1})
				return err
			},
			code: codes.InvalidArgument, reason: "INVALID_PAGE_SIZE", field: "page_size",
		},
	}...)
}

func createPool(id string, p *allocatorv1.Pool) func(context.Context, client) error {
	return func(ctx context.Context, c client) error {
		_, err := c.CreatePool(ctx, &allocatorv1.CreatePoolRequest{PoolId: id, Pool: p})
		return err
	}
}

// firstWatchError starts a watch and returns the error that ends it; a
// watch that sends an event instead is a failure of the case.
func firstWatchError(pool string, from int64) func(context.Context, client) error {
	return func(ctx context.Context, c client) error {
		stream, err := c.WatchAllocations(ctx, &allocatorv1.WatchAllocationsRequest{Pool: pool, StartRevision: from})
		if err != nil {
			return err
		}
		ev, err := stream.Recv()
		if err == nil {
			return &unexpectedEvent{ev: ev}
		}
		return err
	}
}

type unexpectedEvent struct {
	ev *allocatorv1.WatchAllocationsResponse
}

func (u *unexpectedEvent) Error() string { return "watch sent an event: " + u.ev.String() }

func TestErrorReasons(t *testing.T) {
	require.NoError(t, allocserver.CheckErrorTable())
	cases := errorCases()
	var (
		ran  int
		seen = map[string]bool{}
	)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ran++
			e := start(t, tc.opts...)
			if tc.setup != nil {
				tc.setup(t, e)
			}
			err := tc.call(ctx(t), e.client)
			requireStatus(t, err, tc.code, tc.reason, tc.field)
			seen[apierr.Reason(err)] = true
		})
	}
	if ran < len(cases) {
		return // a -run filter picked some cases: coverage is not the question
	}
	var missing []string
	for _, r := range allocserver.ErrorReasons() {
		if !seen[r] && !slices.Contains(notProducible, r) {
			missing = append(missing, r)
		}
	}
	sort.Strings(missing)
	require.Empty(t, missing, "reasons of the error table that no case produced")
}

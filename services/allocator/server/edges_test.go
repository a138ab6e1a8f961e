package server_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
)

// storeUnchanged runs call and checks that the store's revision did not
// move: a refused request wrote nothing.
func storeUnchanged(t *testing.T, e *env, call func() error) error {
	t.Helper()
	before, err := e.store.Snapshot(context.Background())
	require.NoError(t, err)
	callErr := call()
	after, err := e.store.Snapshot(context.Background())
	require.NoError(t, err)
	require.Equal(t, before.Revision, after.Revision, "a refused request changed the store")
	require.Equal(t, len(before.Pools), len(after.Pools))
	require.Equal(t, len(before.Allocations), len(after.Allocations))
	return callErr
}

// requireShort checks that an error's message stays small whatever the
// size of the input it refuses.
func requireShort(t *testing.T, err error) {
	t.Helper()
	require.Less(t, len(status.Convert(err).Message()), 600, "the error echoes too much: %.200s", status.Convert(err).Message())
}

// TestPoolLimits: labels follow Kubernetes' syntax and limits, a pool holds
// at most 64 labels and 256 reserved entries, and an invalid pool id is
// echoed cut short; each refusal has its reason, names the field and
// writes nothing.
func TestPoolLimits(t *testing.T) {
	e := start(t)
	e.createPool(t, "p", poolV4("10.0.0.0/24"))
	many := map[string]string{}
	for i := range 65 {
		many[fmt.Sprintf("k%d", i)] = "v"
	}
	var reserved []string
	for i := range 257 {
		reserved = append(reserved, fmt.Sprintf("10.1.%d.%d", i/200, i%200))
	}
	huge := strings.Repeat("x", 3<<20) // under gRPC's 4 MiB message limit
	cases := []struct {
		name          string
		pool          *allocatorv1.Pool
		reason, field string
	}{
		{"65 labels", &allocatorv1.Pool{Cidrs: []string{"10.1.0.0/16"}, Labels: many}, "TOO_MANY_LABELS", "pool.labels"},
		{"empty key", &allocatorv1.Pool{Cidrs: []string{"10.1.0.0/16"}, Labels: map[string]string{"": "v"}}, "INVALID_LABEL", "pool.labels"},
		{"NUL in a key", &allocatorv1.Pool{Cidrs: []string{"10.1.0.0/16"}, Labels: map[string]string{"a\x00b": "v"}}, "INVALID_LABEL", "pool.labels"},
		{"huge key", &allocatorv1.Pool{Cidrs: []string{"10.1.0.0/16"}, Labels: map[string]string{huge: "v"}}, "INVALID_LABEL", "pool.labels"},
		{"64-character value", &allocatorv1.Pool{Cidrs: []string{"10.1.0.0/16"}, Labels: map[string]string{"team": strings.Repeat("a", 64)}}, "INVALID_LABEL", "pool.labels[team]"},
		{"value with a space", &allocatorv1.Pool{Cidrs: []string{"10.1.0.0/16"}, Labels: map[string]string{"team": "a b"}}, "INVALID_LABEL", "pool.labels[team]"},
		{"257 reserved entries", &allocatorv1.Pool{Cidrs: []string{"10.1.0.0/16"}, Reserved: reserved}, "TOO_MANY_RESERVED", "pool.reserved"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := storeUnchanged(t, e, func() error {
				_, err := e.client.CreatePool(ctx(t), &allocatorv1.CreatePoolRequest{PoolId: "q", Pool: tc.pool})
				return err
			})
			requireStatus(t, err, codes.InvalidArgument, tc.reason, tc.field)
			requireShort(t, err)
			// The same through an update of an existing pool.
			err = storeUnchanged(t, e, func() error {
				_, err := e.client.UpdatePool(ctx(t), &allocatorv1.UpdatePoolRequest{Pool: &allocatorv1.Pool{Name: "pools/p",
					Cidrs: []string{"10.0.0.0/24"}, Labels: tc.pool.GetLabels(), Reserved: tc.pool.GetReserved()}})
				return err
			})
			requireStatus(t, err, codes.InvalidArgument, tc.reason, tc.field)
		})
	}

	// What the limits admit.
	ok := map[string]string{"example.com/team": strings.Repeat("a", 63), "tier": ""}
	for i := len(ok); i < 64; i++ {
		ok[fmt.Sprintf("k%d", i)] = "v"
	}
	e.createPool(t, "fine", &allocatorv1.Pool{Cidrs: []string{"10.2.0.0/16"}, Labels: ok, Reserved: reserved[:256]})

	err := storeUnchanged(t, e, func() error {
		_, err := e.client.CreatePool(ctx(t), &allocatorv1.CreatePoolRequest{PoolId: huge, Pool: poolV4("10.3.0.0/16")})
		return err
	})
	requireStatus(t, err, codes.InvalidArgument, "INVALID_POOL_ID", "pool_id")
	requireShort(t, err)
	require.Contains(t, status.Convert(err).Message(), fmt.Sprintf("(%d bytes)", len(huge)))
	_, err = e.client.GetPool(ctx(t), &allocatorv1.GetPoolRequest{Name: "pools/" + huge})
	requireStatus(t, err, codes.InvalidArgument, "INVALID_POOL_ID", "name")
	requireShort(t, err)
}

// TestOwnerCharacters: owner fields are printable UTF-8 without '/' or
// invisible format characters (bidi overrides, zero-width joiners).
func TestOwnerCharacters(t *testing.T) {
	e := start(t)
	e.createPool(t, "p", poolV4("10.0.0.0/24"))
	for name, bad := range map[string]string{
		"bell": "a\x07b", "NUL": "a\x00b", "right-to-left override": "abc\u202egpj.exe", "zero-width space": "a\u200bb",
		"slash": "a/b", "254 bytes": strings.Repeat("a", 254),
	} {
		t.Run(name, func(t *testing.T) {
			o := pod("ns", "x")
			o.Name = bad
			err := storeUnchanged(t, e, func() error {
				_, err := e.client.Allocate(ctx(t), &allocatorv1.AllocateRequest{Pool: "pools/p", Owner: o})
				return err
			})
			requireStatus(t, err, codes.InvalidArgument, "INVALID_OWNER", "owner.name")
			requireShort(t, err)
		})
	}
	o := pod("ns", "x")
	o.Name = "café-ü.例" // printable letters of any script are fine
	e.allocate(t, "p", o)
}

// TestCreatePoolRequestID: request_id is CreatePool's idempotency key.
func TestCreatePoolRequestID(t *testing.T) {
	e := start(t)
	create := func(requestID, id, cidr string) (*allocatorv1.Pool, error) {
		resp, err := e.client.CreatePool(ctx(t), &allocatorv1.CreatePoolRequest{RequestId: requestID, PoolId: id, Pool: poolV4(cidr)})
		return resp.GetPool(), err
	}
	first, err := create("r1", "p", "10.0.0.0/24")
	require.NoError(t, err)

	again, err := storeUnchanged2(t, e, func() (*allocatorv1.Pool, error) { return create("r1", "p", "10.0.0.0/24") })
	require.NoError(t, err, "same id, same body: the first answer")
	require.Equal(t, first.GetCreateTime().AsTime(), again.GetCreateTime().AsTime())

	_, err = storeUnchanged2(t, e, func() (*allocatorv1.Pool, error) { return create("r1", "p", "10.0.1.0/24") })
	requireStatus(t, err, codes.InvalidArgument, "REQUEST_ID_REUSED", "")
	_, err = storeUnchanged2(t, e, func() (*allocatorv1.Pool, error) { return create("r1", "q", "10.0.2.0/24") })
	requireStatus(t, err, codes.InvalidArgument, "REQUEST_ID_REUSED", "")
	_, err = storeUnchanged2(t, e, func() (*allocatorv1.Pool, error) { return create("r2", "p", "10.0.0.0/24") })
	requireStatus(t, err, codes.AlreadyExists, "POOL_ALREADY_EXISTS", "")
	_, err = storeUnchanged2(t, e, func() (*allocatorv1.Pool, error) { return create("", "p", "10.0.0.0/24") })
	requireStatus(t, err, codes.AlreadyExists, "POOL_ALREADY_EXISTS", "")

	// An Allocate cannot reuse a pool creation's id, nor the reverse.
	_, err = e.client.Allocate(ctx(t), &allocatorv1.AllocateRequest{Pool: "pools/p", Owner: pod("ns", "a"), RequestId: "r1"})
	requireStatus(t, err, codes.InvalidArgument, "REQUEST_ID_REUSED", "")
	_, err = e.client.Allocate(ctx(t), &allocatorv1.AllocateRequest{Pool: "pools/p", Owner: pod("ns", "a"), RequestId: "r3"})
	require.NoError(t, err)
	_, err = create("r3", "s", "10.0.3.0/24")
	requireStatus(t, err, codes.InvalidArgument, "REQUEST_ID_REUSED", "")
}

func storeUnchanged2(t *testing.T, e *env, call func() (*allocatorv1.Pool, error)) (*allocatorv1.Pool, error) {
	t.Helper()
	var p *allocatorv1.Pool
	err := storeUnchanged(t, e, func() error {
		var err error
		p, err = call()
		return err
	})
	return p, err
}

// TestAllocateReplayComparesTheRequest: a retry with the same request_id
// gets the first answer only when it asks for the same thing.
func TestAllocateReplayComparesTheRequest(t *testing.T) {
	e := start(t)
	e.createPool(t, "p", poolV4("10.0.0.0/24"))
	o := pod("ns", "a")
	first, err := e.client.Allocate(ctx(t), &allocatorv1.AllocateRequest{Pool: "pools/p", Owner: o, RequestId: "r", Address: "10.0.0.7"})
	require.NoError(t, err)
	again, err := e.client.Allocate(ctx(t), &allocatorv1.AllocateRequest{Pool: "pools/p", Owner: o, RequestId: "r", Address: "10.0.0.7"})
	require.NoError(t, err)
	require.Equal(t, first.GetAllocation().GetAddress(), again.GetAllocation().GetAddress())

	otherAddr := &allocatorv1.AllocateRequest{Pool: "pools/p", Owner: o, RequestId: "r", Address: "10.0.0.8"}
	otherUID := pod("ns", "a")
	otherUID.Uid = "uid-2"
	for name, req := range map[string]*allocatorv1.AllocateRequest{
		"another address": otherAddr,
		"another uid":     {Pool: "pools/p", Owner: otherUID, RequestId: "r"},
		"another owner":   {Pool: "pools/p", Owner: pod("ns", "b"), RequestId: "r"},
	} {
		t.Run(name, func(t *testing.T) {
			err := storeUnchanged(t, e, func() error { _, err := e.client.Allocate(ctx(t), req); return err })
			requireStatus(t, err, codes.InvalidArgument, "REQUEST_ID_REUSED", "")
		})
	}
}

// TestReleaseTargets: a release that names the allocation both ways must
// agree with itself, and an owner needs a kind and a name.
func TestReleaseTargets(t *testing.T) {
	e := start(t)
	e.createPool(t, "p", poolV4("10.0.0.0/24"))
	e.createPool(t, "q", poolV4("10.1.0.0/24"))
	a := e.allocate(t, "p", pod("ns", "a"))
	e.allocate(t, "p", pod("ns", "b"))
	name := "pools/p/allocations/" + a.GetAddress()

	cases := []struct {
		name          string
		req           *allocatorv1.ReleaseRequest
		code          codes.Code
		reason, field string
	}{
		{"name and another pool", &allocatorv1.ReleaseRequest{Name: name, Pool: "pools/q", Owner: pod("ns", "a")}, codes.InvalidArgument, "TARGET_MISMATCH", "pool"},
		{"name and another owner", &allocatorv1.ReleaseRequest{Name: name, Pool: "pools/p", Owner: pod("ns", "b")}, codes.FailedPrecondition, "OWNER_MISMATCH", ""},
		{"empty owner", &allocatorv1.ReleaseRequest{Pool: "pools/p", Owner: &allocatorv1.Owner{}}, codes.InvalidArgument, "REQUIRED", "owner.kind"},
		{"owner without a name", &allocatorv1.ReleaseRequest{Pool: "pools/p", Owner: &allocatorv1.Owner{Kind: "Pod"}}, codes.InvalidArgument, "REQUIRED", "owner.name"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := storeUnchanged(t, e, func() error { _, err := e.client.Release(ctx(t), tc.req); return err })
			requireStatus(t, err, tc.code, tc.reason, tc.field)
		})
	}
	resp, err := e.client.Release(ctx(t), &allocatorv1.ReleaseRequest{Name: name, Pool: "pools/p", Owner: pod("ns", "a")})
	require.NoError(t, err, "both ways, agreeing")
	require.Equal(t, a.GetAddress(), resp.GetAllocation().GetAddress())
}

// TestIPv6SubnetRouterAnycast: an IPv6 pool never hands out the
// all-zeros address of its CIDR (RFC 4291 2.6.1).
func TestIPv6SubnetRouterAnycast(t *testing.T) {
	e := start(t)
	p := e.createPool(t, "v6", &allocatorv1.Pool{Cidrs: []string{"fd00::/120"}})
	require.Equal(t, "255", p.GetStats().GetCapacity())
	require.Equal(t, "fd00::1", e.allocate(t, "v6", pod("ns", "a")).GetAddress())
	err := storeUnchanged(t, e, func() error {
		_, err := e.client.Allocate(ctx(t), &allocatorv1.AllocateRequest{Pool: "pools/v6", Owner: pod("ns", "b"), Address: "fd00::"})
		return err
	})
	requireStatus(t, err, codes.InvalidArgument, "ADDRESS_RESERVED", "")
	require.Contains(t, status.Convert(err).Message(), "Subnet-Router anycast")
}

// rawCodec sends and receives bytes as they are, to send what a generated
// client cannot: malformed protobuf.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }
func (rawCodec) Marshal(v any) ([]byte, error) {
	return *(v.(*[]byte)), nil
}
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}

// TestUndecodableRequests: a request that is not a valid encoding of its
// message (truncated, a string that is not UTF-8) is the client's fault:
// INVALID_ARGUMENT with reason UNDECODABLE_REQUEST, unary and streaming,
// and nothing is written.
func TestUndecodableRequests(t *testing.T) {
	e := start(t)
	e.createPool(t, "p", poolV4("10.0.0.0/24"))
	valid, err := proto.Marshal(&allocatorv1.AllocateRequest{Pool: "pools/p", Owner: pod("ns", "abc")})
	require.NoError(t, err)
	notUTF8 := bytes.Replace(valid, []byte("abc"), []byte("a\xffc"), 1)
	require.NotEqual(t, valid, notUTF8)
	for name, body := range map[string][]byte{
		"truncated":     valid[:len(valid)-1],
		"invalid UTF-8": notUTF8,
		"garbage":       {0xff, 0xff, 0xff, 0xff},
	} {
		t.Run(name, func(t *testing.T) {
			err := storeUnchanged(t, e, func() error {
				var out []byte
				return e.conn.Invoke(ctx(t), "/plexus.allocator.v1.AllocatorService/Allocate", &body, &out, grpc.ForceCodec(rawCodec{}))
			})
			requireStatus(t, err, codes.InvalidArgument, "UNDECODABLE_REQUEST", "")
		})
	}

	desc := &grpc.StreamDesc{StreamName: "WatchAllocations", ServerStreams: true}
	stream, err := e.conn.NewStream(ctx(t), desc, "/plexus.allocator.v1.AllocatorService/WatchAllocations", grpc.ForceCodec(rawCodec{}))
	require.NoError(t, err)
	body := []byte{0x0a, 0x10, 'p'} // pool: a 16-byte string of which one byte came
	require.NoError(t, stream.SendMsg(&body))
	require.NoError(t, stream.CloseSend())
	var out []byte
	err = stream.RecvMsg(&out)
	requireStatus(t, err, codes.InvalidArgument, "UNDECODABLE_REQUEST", "")

	// The same connection still works.
	e.allocate(t, "p", pod("ns", "abc"))
}

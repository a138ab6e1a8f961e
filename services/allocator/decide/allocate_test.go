package decide

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/services/allocator/ipam"
)

var (
	pod    = Owner{Cluster: "a", Kind: "Pod", Namespace: "ns", Name: "web-0", UID: "u1"}
	podNew = Owner{Cluster: "a", Kind: "Pod", Namespace: "ns", Name: "web-0", UID: "u2"}
	addr1  = netip.MustParseAddr("10.0.0.1")
	addr2  = netip.MustParseAddr("10.0.0.2")
)

// allocateCases are what an owner asks for against what its pool holds
// for it; every way in (Allocate, BatchAllocate) must decide them alike.
var allocateCases = []struct {
	name    string
	req     Request
	held    *Holding
	pending bool
	want    Step
	wantErr error
}{
	{name: "nothing held: reserve", req: Request{Pool: "p", Owner: pod}, want: Reserve},
	{name: "nothing held, an address named: reserve it", req: Request{Pool: "p", Owner: pod, Address: addr2}, want: Reserve},
	{name: "another request of the owner in flight: await it", req: Request{Pool: "p", Owner: pod}, pending: true, want: AwaitPending},
	{name: "held: keep", req: Request{Pool: "p", Owner: pod}, held: &Holding{Address: addr1, Owner: pod}, want: Keep},
	{name: "held, no uid asked: keep", req: Request{Pool: "p", Owner: Owner{Cluster: "a", Kind: "Pod", Namespace: "ns", Name: "web-0"}},
		held: &Holding{Address: addr1, Owner: pod}, want: Keep},
	{name: "held, the same address named: keep", req: Request{Pool: "p", Owner: pod, Address: addr1}, held: &Holding{Address: addr1, Owner: pod}, want: Keep},
	{name: "held, another address named: in use", req: Request{Pool: "p", Owner: pod, Address: addr2}, held: &Holding{Address: addr1, Owner: pod}, wantErr: ipam.ErrInUse},
	{name: "held, another address named by a new uid: in use", req: Request{Pool: "p", Owner: podNew, Address: addr2}, held: &Holding{Address: addr1, Owner: pod}, wantErr: ipam.ErrInUse},
	{name: "held by an older incarnation: rebind", req: Request{Pool: "p", Owner: podNew}, held: &Holding{Address: addr1, Owner: pod}, want: Rebind},
	{name: "held and being released: await the release", req: Request{Pool: "p", Owner: pod, Address: addr2}, held: &Holding{Address: addr1, Owner: pod, Releasing: true}, want: AwaitRelease},
	{name: "held wins over pending", req: Request{Pool: "p", Owner: pod}, held: &Holding{Address: addr1, Owner: pod}, pending: true, want: Keep},
}

func TestAllocate(t *testing.T) {
	for _, tc := range allocateCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Allocate(tc.req, tc.held, tc.pending)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

// TestBatchDecidesAsAllocate: a request decided inside a batch gets the
// step, or the refusal, it gets alone, wherever it stands in the batch.
func TestBatchDecidesAsAllocate(t *testing.T) {
	other := Request{Pool: "q", Owner: Owner{Cluster: "a", Kind: "Pod", Namespace: "ns", Name: "other"}}
	for _, tc := range allocateCases {
		t.Run(tc.name, func(t *testing.T) {
			alone, aloneErr := Allocate(tc.req, tc.held, tc.pending)
			for at := range 2 {
				reqs := []Request{other, other}
				reqs[at] = tc.req
				steps, err := Batch(reqs, func(i int) (*Holding, bool) {
					if i == at {
						return tc.held, tc.pending
					}
					return nil, false
				})
				if aloneErr != nil {
					require.ErrorIs(t, err, tc.wantErr)
					require.ErrorContains(t, err, fmt.Sprintf("requests[%d]", at), "the refusal names the request")
					require.Equal(t, errors.Unwrap(err).Error(), aloneErr.Error())
					continue
				}
				require.NoError(t, err)
				require.Equal(t, alone, steps[at])
				require.Equal(t, Reserve, steps[1-at])
			}
		})
	}
}

func TestValidateBatch(t *testing.T) {
	ok := Request{Pool: "p", Owner: pod}
	require.NoError(t, ValidateBatch([]Request{ok, {Pool: "q", Owner: pod}}))
	for _, tc := range []struct {
		name   string
		reqs   []Request
		reason string
		field  string
	}{
		{"empty", nil, "EMPTY_BATCH", "requests"},
		{"owner twice in a pool", []Request{ok, {Pool: "p", Owner: podNew}}, "DUPLICATE_OWNER", "requests[1].owner"},
		{"bad pool id", []Request{ok, {Pool: "P", Owner: pod}}, "INVALID_POOL_ID", "requests[1].pool"},
		{"owner without kind", []Request{{Pool: "p", Owner: Owner{Name: "x"}}}, "REQUIRED", "requests[0].owner.kind"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fe *FieldError
			require.ErrorAs(t, ValidateBatch(tc.reqs), &fe)
			require.Equal(t, tc.reason, fe.Reason)
			require.Equal(t, tc.field, fe.Field)
		})
	}
}

func TestAwaited(t *testing.T) {
	require.NoError(t, Awaited(nil))
	require.ErrorIs(t, Awaited(context.Canceled), ErrConflict, "the first request gave up: decide again")
	require.ErrorIs(t, Awaited(fmt.Errorf("x: %w", context.DeadlineExceeded)), ErrConflict)
	require.ErrorIs(t, Awaited(ipam.ErrExhausted), ipam.ErrExhausted, "the first request's refusal is this one's")
}

func TestAnswers(t *testing.T) {
	rec := Holding{Pool: "p", Address: addr1, Owner: pod, Revision: 7}
	for _, tc := range []struct {
		name string
		req  Request
		want bool
	}{
		{"same request", Request{Pool: "p", Owner: pod}, true},
		{"same request naming the address", Request{Pool: "p", Owner: pod, Address: addr1}, true},
		{"another pool", Request{Pool: "q", Owner: pod}, false},
		{"another owner", Request{Pool: "p", Owner: Owner{Cluster: "a", Kind: "Pod", Namespace: "ns", Name: "web-1", UID: "u1"}}, false},
		{"another uid", Request{Pool: "p", Owner: podNew}, false},
		{"another address", Request{Pool: "p", Owner: pod, Address: addr2}, false},
	} {
		require.Equal(t, tc.want, Answers(rec, tc.req), tc.name)
	}
}

func TestRelease(t *testing.T) {
	h := Holding{Pool: "p", Address: addr1, Owner: pod, Revision: 7}
	for _, tc := range []struct {
		name    string
		req     ReleaseRequest
		h       Holding
		want    Step
		wantErr error
	}{
		{name: "no guard", req: ReleaseRequest{Pool: "p", Address: addr1}, h: h, want: Free},
		{name: "right etag", req: ReleaseRequest{Pool: "p", Address: addr1, Etag: "7"}, h: h, want: Free},
		{name: "stale etag", req: ReleaseRequest{Pool: "p", Address: addr1, Etag: "6"}, h: h, wantErr: ErrEtagMismatch},
		{name: "right uid", req: ReleaseRequest{Pool: "p", Address: addr1, OwnerUID: "u1"}, h: h, want: Free},
		{name: "other uid", req: ReleaseRequest{Pool: "p", Address: addr1, OwnerUID: "u2"}, h: h, wantErr: ErrOwnerMismatch},
		{name: "address held by another owner", req: ReleaseRequest{Pool: "p", Address: addr1, Owner: Owner{Cluster: "b", Kind: "Pod", Name: "x"}}, h: h, wantErr: ErrOwnerMismatch},
		{name: "by owner", req: ReleaseRequest{Pool: "p", Owner: pod}, h: h, want: Free},
		{name: "being released: await, before any guard", req: ReleaseRequest{Pool: "p", Address: addr1, Etag: "6"}, h: Holding{Address: addr1, Owner: pod, Revision: 7, Releasing: true}, want: AwaitRelease},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Release(tc.req, tc.h)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestUpdate(t *testing.T) {
	cur := PoolSpec{CIDRs: []string{"10.0.0.0/24"}, Labels: map[string]string{"a": "b"}}
	got, err := Update(cur, true, PoolSpec{CIDRs: []string{"10.0.0.0/23"}, Labels: map[string]string{"x": "y"}}, UpdateMask{CIDRs: true})
	require.NoError(t, err)
	require.Equal(t, []string{"10.0.0.0/23"}, got.CIDRs)
	require.Equal(t, map[string]string{"a": "b"}, got.Labels, "a field the mask leaves out stays")
	_, err = Update(cur, true, PoolSpec{CIDRs: []string{"fd00::/64"}}, UpdateMask{CIDRs: true})
	require.ErrorIs(t, err, ErrFamilyMismatch)
	_, err = Update(cur, true, PoolSpec{Reserved: []string{"not a range"}}, UpdateMask{Reserved: true})
	var fe *FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "INVALID_RANGE", fe.Reason)
}

func TestRemoved(t *testing.T) {
	p := netip.MustParsePrefix
	rs := Removed([]netip.Prefix{p("10.0.0.0/23")}, []netip.Prefix{p("10.0.0.0/24")})
	require.Len(t, rs, 1)
	require.Equal(t, "10.0.1.0", rs[0].First.String())
	require.Equal(t, "10.0.1.255", rs[0].Last.String())
	require.Empty(t, Removed([]netip.Prefix{p("10.0.0.0/24")}, []netip.Prefix{p("10.0.0.0/23")}))
}

func TestCheckEtag(t *testing.T) {
	require.NoError(t, CheckEtag("pool p", 5, ""))
	require.NoError(t, CheckEtag("pool p", 5, "5"))
	require.ErrorIs(t, CheckEtag("pool p", 5, "4"), ErrEtagMismatch)
}

func TestDeletePool(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		held, inFlight, chunk int
		force, underWay       bool
		want                  Deletion
		wantErr               error
	}{
		{name: "empty", chunk: 10, want: DeleteAtOnce},
		{name: "holds some, not forced", held: 3, chunk: 10, wantErr: ErrPoolNotEmpty},
		{name: "one in flight, not forced", inFlight: 1, chunk: 10, wantErr: ErrPoolNotEmpty},
		{name: "forced, within a chunk", held: 10, chunk: 10, force: true, want: DeleteAtOnce},
		{name: "forced, beyond a chunk", held: 11, chunk: 10, force: true, want: DeleteInChunks},
		{name: "forced, a deletion under way", held: 2, chunk: 10, force: true, underWay: true, want: DeleteInChunks},
		{name: "not forced, empty, a deletion under way", chunk: 10, underWay: true, want: DeleteAtOnce},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DeletePool("p", tc.held, tc.inFlight, tc.force, tc.underWay, tc.chunk)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

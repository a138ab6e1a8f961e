package record

import (
	"hash/maphash"
	"math"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/services/allocator/decide"
	"github.com/plexusnet/plexus/services/allocator/store"
)

func TestValuesRoundTrip(t *testing.T) {
	times := []time.Time{{}, time.Unix(0, 0).UTC(), time.Date(2025, 1, 2, 3, 4, 5, 999999999, time.UTC), time.Date(1969, 12, 31, 23, 59, 59, 1, time.UTC)}
	for i, tm := range times {
		p := store.Pool{
			ID: "p", CIDRs: []string{"10.0.0.0/8"}, Reserved: []string{"10.0.0.1", "10.0.0.5-10.0.0.7"},
			ReuseDelay: -time.Nanosecond, Labels: map[string]string{"": "", "k": "v\x00"},
			AllowOverlap: i&1 != 0, Deleting: i&2 != 0, // every pair of flags
			ClusterQuota: []uint32{0, 1, 250, math.MaxUint32}[i],
			CreateTime:   tm, UpdateTime: tm, Revision: 1<<62 + 1,
		}
		got, err := DecodePool("p", EncodePool(&p, p.Revision))
		require.NoError(t, err)
		require.Equal(t, p, got)

		a := store.Allocation{
			Pool: "p", Address: netip.MustParseAddr("2001:db8::1"),
			Owner:      decide.Owner{Cluster: "c", Kind: "k", Namespace: "", Name: "n/é", UID: "u"},
			CreateTime: tm, RequestID: "r", Revision: 7,
			CreatorCluster: []string{"", "c", "east-1", ""}[i],
		}
		gotA, err := DecodeAllocation("p", a.Address, encodeAllocation(&a, 7))
		require.NoError(t, err)
		require.Equal(t, a, gotA)

		q := store.Quarantine{Pool: "p", Address: a.Address, Until: tm}
		gotQ, err := DecodeQuarantine("p", a.Address, EncodeQuarantine(&q))
		require.NoError(t, err)
		require.Equal(t, q, gotQ)
	}
}

// TestAllocationValueSize keeps an eye on the size that makes a million
// allocations cheap to store and to read back.
func TestAllocationValueSize(t *testing.T) {
	a := store.Allocation{
		Owner:      decide.Owner{Cluster: "cluster-east-1", Kind: "Pod", Namespace: "payments", Name: "checkout-7d9f8b6c5-x2x9q", UID: "3f2b8c1e-5d4a-4c3b-9e8f-1a2b3c4d5e6f"},
		CreateTime: time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC),
		Revision:   1_000_000,
	}
	// The strings themselves take 84 bytes.
	require.LessOrEqual(t, len(encodeAllocation(&a, a.Revision)), 84+20)
	// A creator costs a byte when it is the owner's cluster, its name and
	// two bytes when it is another, and nothing when there is none.
	without := len(encodeAllocation(&a, a.Revision))
	a.CreatorCluster = "cluster-east-1"
	require.Equal(t, without+1, len(encodeAllocation(&a, a.Revision)))
	a.CreatorCluster = "cluster-west-2"
	require.Equal(t, without+2+len(a.CreatorCluster), len(encodeAllocation(&a, a.Revision)))
}

// TestAllocationFlags: a value with flags carries them behind its own
// version byte; flags this version does not know are refused.
func TestAllocationFlags(t *testing.T) {
	a := store.Allocation{Owner: decide.Owner{Name: "n"}, CreatorCluster: "c"}
	v := encodeAllocation(&a, 1)
	require.Equal(t, byte(VersionFlagged), v[0])
	a.CreatorCluster = ""
	require.Equal(t, byte(Version), encodeAllocation(&a, 1)[0])
	bad := append(appendAllocationBase(nil, VersionFlagged, &a, 1), 0x80|allocCreator, 0x01)
	_, err := DecodeAllocation("p", netip.MustParseAddr("10.0.0.1"), bad)
	require.ErrorContains(t, err, "unknown allocation flags")
}

func TestDecodeRejectsDamage(t *testing.T) {
	a := store.Allocation{Owner: decide.Owner{Name: "n"}, CreateTime: time.Unix(1, 2), Revision: 9}
	v := encodeAllocation(&a, 9)
	for i := range v {
		_, err := DecodeAllocation("p", netip.MustParseAddr("10.0.0.1"), v[:i])
		require.Error(t, err, "truncated to %d bytes", i)
	}
	_, err := DecodeAllocation("p", netip.MustParseAddr("10.0.0.1"), append(v, 0))
	require.ErrorContains(t, err, "trailing")
	v[0] = VersionFlagged + 1
	_, err = DecodeAllocation("p", netip.MustParseAddr("10.0.0.1"), v)
	require.ErrorContains(t, err, "version")
}

// TestRecordRoundTrip: a record carries its allocation's pool and
// address, and a record cut short anywhere is an error.
func TestRecordRoundTrip(t *testing.T) {
	for _, addr := range []string{"10.0.0.1", "2001:db8::1"} {
		a := store.Allocation{
			Pool: "pool-1", Address: netip.MustParseAddr(addr),
			Owner:      decide.Owner{Cluster: "c", Kind: "Pod", Namespace: "ns", Name: "n", UID: "u"},
			CreateTime: time.Unix(5, 6).UTC(), RequestID: "r", Revision: 11,
			CreatorCluster: map[string]string{"10.0.0.1": "east"}[addr],
		}
		v := EncodeRecord(&a, 11)
		got, err := DecodeRecord(v)
		require.NoError(t, err)
		require.Equal(t, a, got)
		for i := range v {
			_, err := DecodeRecord(v[:i])
			require.Error(t, err, "truncated to %d bytes", i)
		}
	}
}

// FuzzDecode: no stored bytes, however damaged, make a decoder panic or
// allocate without bound, and HashOwnerKey agrees with the decoder.
func FuzzDecode(f *testing.F) {
	p := store.Pool{ID: "p", CIDRs: []string{"10.0.0.0/8"}, Labels: map[string]string{"a": "b"}}
	a := store.Allocation{Owner: decide.Owner{Name: "n"}}
	f.Add(EncodePool(&p, 1))
	f.Add(encodeAllocation(&a, 2))
	f.Add(EncodeQuarantine(&store.Quarantine{}))
	a.Pool, a.Address = "p", netip.MustParseAddr("fd00::1")
	f.Add(EncodeRecord(&a, 4))
	a.CreatorCluster = "c"
	f.Add(EncodeRecord(&a, 5))
	f.Add(encodeAllocation(&a, 6))
	f.Fuzz(func(t *testing.T, v []byte) {
		addr := netip.MustParseAddr("10.0.0.1")
		if got, err := DecodeRecord(v); err == nil {
			// What decodes, survives being written again.
			again, err := DecodeRecord(EncodeRecord(&got, got.Revision))
			require.NoError(t, err)
			require.Equal(t, got, again)
		}
		_, _ = DecodePool("p", v)
		seed := maphash.MakeSeed()
		var h, want maphash.Hash
		h.SetSeed(seed)
		want.SetSeed(seed)
		err := HashOwnerKey(&h, v)
		if got, derr := DecodeAllocation("p", addr, v); derr == nil {
			// The owner key hashed from the value is the decoded owner's.
			require.NoError(t, err)
			want.WriteString(got.Owner.Key())
			require.Equal(t, want.Sum64(), h.Sum64(), "%+v", got.Owner)
		}
		_, _ = DecodeQuarantine("p", addr, v)
	})
}

// encodeAllocation is an allocation's value without its pool and address,
// as formats 1 and 2 stored it.
func encodeAllocation(a *store.Allocation, rev int64) []byte { return AppendAllocation(nil, a, rev) }

// TestEventRoundTrip: an event's records come back from its encoding,
// whichever it carries, the zero address included.
func TestEventRoundTrip(t *testing.T) {
	tm := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	p := &store.Pool{ID: "p", CIDRs: []string{"fd00::/64"}, Labels: map[string]string{"a": "b"}, CreateTime: tm, UpdateTime: tm, Revision: 4}
	a := &store.Allocation{Pool: "p", Address: netip.MustParseAddr("fd00::1"), Owner: decide.Owner{Name: "n", UID: "u"}, CreateTime: tm, RequestID: "r", Revision: 3}
	vip := &store.Allocation{Pool: "p", Address: netip.MustParseAddr("fd00::2"), Owner: decide.Owner{Name: "v"}, CreatorCluster: "east", Revision: 8}
	q := &store.Quarantine{Pool: "p", Address: netip.MustParseAddr("10.0.0.1"), Until: tm}
	for _, ev := range []store.Event{
		{Type: store.EventPutPool, Revision: 4, Pool: p},
		{Type: store.EventDeleteAllocation, Revision: 5, Allocation: a},
		{Type: store.EventPutQuarantine, Revision: 5, Quarantine: q},
		{Type: store.EventPutAllocation, Revision: 6, Allocation: &store.Allocation{Pool: "p"}},
		{Type: store.EventPutAllocation, Revision: 7},
		{Pool: p, Allocation: a, Quarantine: q},
		{Type: store.EventDeleteAllocation, Revision: 8, Allocation: vip, Quarantine: q},
	} {
		enc := AppendEvent(nil, &ev)
		got := store.Event{Type: ev.Type, Revision: ev.Revision}
		require.NoError(t, DecodeEvent(enc, &got))
		require.Equal(t, ev, got)
		for i := range enc {
			require.Error(t, DecodeEvent(enc[:i], &store.Event{}), "truncated to %d bytes", i)
		}
	}
}

// FuzzDecodeEvent: no bytes make the event decoder panic or allocate
// without bound, and what decodes is encoded back to the same records.
func FuzzDecodeEvent(f *testing.F) {
	a := &store.Allocation{Pool: "p", Address: netip.MustParseAddr("10.0.0.1"), Owner: decide.Owner{Name: "n"}}
	f.Add([]byte(AppendEvent(nil, &store.Event{Allocation: a})))
	f.Add([]byte(AppendEvent(nil, &store.Event{Allocation: &store.Allocation{Pool: "p", CreatorCluster: "c"}})))
	f.Add([]byte(AppendEvent(nil, &store.Event{Pool: &store.Pool{ID: "p", Reserved: []string{"x"}}})))
	f.Add([]byte(AppendEvent(nil, &store.Event{Quarantine: &store.Quarantine{Pool: "p"}})))
	f.Fuzz(func(t *testing.T, v []byte) {
		var ev store.Event
		if DecodeEvent(v, &ev) != nil {
			return
		}
		var again store.Event
		require.NoError(t, DecodeEvent(AppendEvent(nil, &ev), &again))
		require.Equal(t, ev, again)
	})
}

func TestRequestRoundTrip(t *testing.T) {
	r := store.Request{ID: "r", Allocations: []string{"p/10.0.0.1", ""}, Revision: 3}
	put := time.Unix(1700000000, 5).UTC()
	v := EncodeRequest(&r, 3, put)
	got, at, err := DecodeRequest("r", v)
	require.NoError(t, err)
	require.Equal(t, r, got)
	require.True(t, at.Equal(put))
	for i := range v {
		_, _, err := DecodeRequest("r", v[:i])
		require.Error(t, err, "truncated to %d bytes", i)
	}
}

// FuzzDecodeRequest: no stored request record, however damaged, makes
// the decoder panic or allocate without bound.
func FuzzDecodeRequest(f *testing.F) {
	f.Add(EncodeRequest(&store.Request{Allocations: []string{"x"}}, 3, time.Unix(1, 2)))
	f.Fuzz(func(t *testing.T, v []byte) {
		if got, at, err := DecodeRequest("r", v); err == nil {
			again, at2, err := DecodeRequest("r", EncodeRequest(&got, got.Revision, at))
			require.NoError(t, err)
			require.Equal(t, got, again)
			require.Equal(t, at, at2)
		}
	})
}

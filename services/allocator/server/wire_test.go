package server

import (
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	"github.com/plexusnet/plexus/services/allocator/decide"
	"github.com/plexusnet/plexus/services/allocator/store"
)

// marshalAdded and marshalSnapshot are what the watch sent before the
// wire encoder: the generated messages, marshalled.
func marshalAdded(a store.Allocation, outOfRange bool) ([]byte, error) {
	return proto.Marshal(&allocatorv1.WatchAllocationsResponse{Type: allocatorv1.EventType_EVENT_TYPE_ADDED, Allocation: allocationMsg(a, outOfRange), Revision: a.Revision})
}

func marshalSnapshot(as []store.Allocation, outOfRange func(*store.Allocation) bool) ([]byte, error) {
	resp := &allocatorv1.WatchAllocationsResponse{Type: allocatorv1.EventType_EVENT_TYPE_ADDED, Snapshot: make([]*allocatorv1.Allocation, len(as))}
	for i := range as {
		resp.Snapshot[i] = allocationMsg(as[i], outOfRange(&as[i]))
	}
	return proto.Marshal(resp)
}

func wireAllocations() []store.Allocation {
	created := time.Date(2026, 11, 28, 12, 0, 0, 123456789, time.UTC)
	return []store.Allocation{
		{Pool: "vips", Address: netip.MustParseAddr("10.97.0.16"), Owner: decide.Owner{Kind: "ClusterSetService", Namespace: "shop", Name: "cart"}, Revision: 3, CreateTime: created, CreatorCluster: "east"},
		{Pool: "workloads", Address: netip.MustParseAddr("10.200.0.1"), Owner: decide.Owner{Cluster: "a", Kind: "ExternalWorkload", Namespace: "shop", Name: "vm-1", UID: "58e98c00-5c81-4a9b-bb18-2471ce97fb76"}, Revision: 1 << 40, CreateTime: created.Add(time.Hour), CreatorCluster: "a"},
		{Pool: "v6", Address: netip.MustParseAddr("fd00::1"), Owner: decide.Owner{Kind: "Pod", Name: "ünïcode-名前"}, Revision: 0, CreateTime: time.Unix(1700000000, 0)},
		{Pool: "v6", Address: netip.MustParseAddr("::ffff:10.0.0.1"), Owner: decide.Owner{}, Revision: 7},                             // zero time: negative seconds
		{Pool: "p", Address: netip.MustParseAddr("2001:db8::ffff:ffff"), Owner: decide.Owner{Name: "n"}, CreateTime: time.Unix(0, 5)}, // nanos alone
		{Pool: "p", Address: netip.MustParseAddr("0.0.0.0"), Revision: -1, CreateTime: time.Unix(0, 0)},
	}
}

func TestWireEncoderWritesWhatMarshalWrites(t *testing.T) {
	var e wireEncoder
	as := wireAllocations()
	for i := range as {
		for _, oor := range []bool{false, true} {
			want, err := marshalAdded(as[i], oor)
			require.NoError(t, err)
			got, ok := e.appendAdded(nil, &as[i], oor)
			require.True(t, ok)
			require.Equal(t, want, got, "allocation %d, out of range %v", i, oor)
		}
	}
	odd := func(a *store.Allocation) bool { return a.Revision%2 != 0 }
	want, err := marshalSnapshot(as, odd)
	require.NoError(t, err)
	got, ok := e.appendSnapshot(nil, as, odd)
	require.True(t, ok)
	require.Equal(t, want, got)

	got, ok = e.appendSnapshot(nil, nil, odd)
	require.True(t, ok)
	want, err = marshalSnapshot(nil, odd)
	require.NoError(t, err)
	require.Equal(t, want, got, "an empty batch")
}

// TestWireEncoderLeavesBadStringsToMarshal: a string that is not UTF-8 (an
// owner stored before owners were checked) is left to proto.Marshal, which
// refuses it, as the watch did before.
func TestWireEncoderLeavesBadStringsToMarshal(t *testing.T) {
	var e wireEncoder
	a := wireAllocations()[0]
	a.Owner.Name = "bad\xff"
	_, ok := e.appendAdded(nil, &a, false)
	require.False(t, ok)
	_, err := marshalAdded(a, false)
	require.Error(t, err)
	_, ok = e.appendSnapshot(nil, []store.Allocation{wireAllocations()[1], a}, func(*store.Allocation) bool { return false })
	require.False(t, ok)
	a = wireAllocations()[0]
	a.Address = netip.Addr{}
	_, ok = e.appendAdded(nil, &a, false)
	require.False(t, ok, "the zero address is left to allocationTo")
}

func FuzzWireEncoder(f *testing.F) {
	for _, a := range wireAllocations() {
		b16 := a.Address.As16()
		f.Add(a.Pool, b16[:], a.Address.Is4(), a.Owner.Cluster, a.Owner.Kind, a.Owner.Namespace, a.Owner.Name, a.Owner.UID, a.CreateTime.Unix(), int64(a.CreateTime.Nanosecond()), a.Revision, a.Revision%2 == 0)
	}
	f.Fuzz(func(t *testing.T, pool string, addr []byte, is4 bool, cluster, kind, ns, name, uid string, secs, nanos, rev int64, oor bool) {
		var b16 [16]byte
		copy(b16[:], addr)
		ip := netip.AddrFrom16(b16)
		if is4 {
			ip = ip.Unmap()
			if !ip.Is4() {
				ip = netip.AddrFrom4([4]byte(b16[12:]))
			}
		}
		a := store.Allocation{Pool: pool, Address: ip, Owner: decide.Owner{Cluster: cluster, Kind: kind, Namespace: ns, Name: name, UID: uid},
			Revision: rev, CreateTime: time.Unix(secs, nanos%1e9)}
		want, err := marshalAdded(a, oor)
		var e wireEncoder
		got, ok := e.appendAdded(nil, &a, oor)
		if err != nil {
			require.False(t, ok, "proto.Marshal refused it: %v", err)
			return
		}
		require.True(t, ok)
		require.Equal(t, want, got)
		wantB, err := marshalSnapshot([]store.Allocation{a, a}, func(*store.Allocation) bool { return oor })
		require.NoError(t, err)
		gotB, ok := e.appendSnapshot(nil, []store.Allocation{a, a}, func(*store.Allocation) bool { return oor })
		require.True(t, ok)
		require.Equal(t, wantB, gotB)
	})
}

// BenchmarkSnapshotBatch encodes a batch of 512 allocations of a watch's
// snapshot (a chunk), the way the watch did before (messages, marshalled)
// and through the wire encoder.
func BenchmarkSnapshotBatch(b *testing.B) {
	as := make([]store.Allocation, 512)
	created := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	for i := range as {
		as[i] = store.Allocation{Pool: "big", Address: netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}),
			Owner:    decide.Owner{Cluster: "a", Kind: "Pod", Namespace: "load", Name: "owner-" + strconv.Itoa(i), UID: "6f1c2a9e-1b7d-4c3e-9a51-0d2f4b8e7c6a"},
			Revision: int64(1000 + i), CreateTime: created}
	}
	inRange := func(*store.Allocation) bool { return false }
	b.Run("messages", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := marshalSnapshot(as, inRange); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("wire", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var e wireEncoder
			if _, ok := e.appendSnapshot(make([]byte, 0, len(as)*wireSizeHint), as, inRange); !ok {
				b.Fatal("refused")
			}
		}
	})
}

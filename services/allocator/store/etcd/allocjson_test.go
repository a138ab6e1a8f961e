package etcd

import (
	"encoding/json"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/services/allocator/decide"
	"github.com/plexusnet/plexus/services/allocator/store"
)

func sampleAllocs() []store.Allocation {
	t := time.Date(2026, 11, 23, 16, 30, 1, 123456789, time.UTC)
	return []store.Allocation{
		{Pool: "scale", Address: netip.MustParseAddr("10.1.2.3"), CreateTime: t, RequestID: "req-1",
			Owner: decide.Owner{Cluster: "east", Kind: "Service", Namespace: "shop", Name: "web", UID: "4f6c"}},
		{Pool: "v6", Address: netip.MustParseAddr("fd00::1:2"), CreateTime: t.Truncate(time.Second),
			Owner: decide.Owner{Kind: "Pod", Name: "p"}},
		{Pool: "p", Address: netip.MustParseAddr("192.0.2.1")},
	}
}

// The values the store writes take the direct path, and it reads them as
// encoding/json does.
func TestParseAllocValueReadsWhatEncodeWrites(t *testing.T) {
	for _, a := range sampleAllocs() {
		v := []byte(encodeAlloc(&a))
		got, ok := parseAllocValue(v)
		require.True(t, ok, "%s", v)
		var want allocValue
		require.NoError(t, json.Unmarshal(v, &want))
		require.Equal(t, want, got)

		dec, err := decodeAlloc(v, 7)
		require.NoError(t, err)
		a.Revision = 7
		require.True(t, a.CreateTime.Equal(dec.CreateTime))
		dec.CreateTime = a.CreateTime
		require.Equal(t, a, dec)
	}
}

// Values of another shape are left to encoding/json, and decodeAlloc still
// reads them, or refuses them, as it does.
func TestParseAllocValueLeavesOtherShapes(t *testing.T) {
	valid := []string{
		`{"pool":"p","address":"10.0.0.1","owner":{"name":"a\"b"},"create_time":"2026-01-02T03:04:05Z"}`,
		`{"pool":"p","address":"10.0.0.1","owner":{"name":"a\u0026b"},"create_time":"2026-01-02T03:04:05Z"}`,
		`{"pool":"p","address":"10.0.0.1","owner":{"name":"ünï"},"create_time":"2026-01-02T03:04:05Z"}`,
		`{ "pool":"p","address":"10.0.0.1","owner":{},"create_time":"2026-01-02T03:04:05Z"}`,
		`{"address":"10.0.0.1","pool":"p","owner":{},"create_time":"2026-01-02T03:04:05Z"}`,
		`{"Pool":"p","address":"10.0.0.1","owner":{},"create_time":"2026-01-02T03:04:05Z"}`,
		`{"pool":"p","pool":"q","address":"10.0.0.1","owner":{},"create_time":"2026-01-02T03:04:05Z"}`,
		`{"pool":"p","address":"10.0.0.1","owner":null,"create_time":"2026-01-02T03:04:05Z","extra":1}`,
		`{"pool":"p","address":"10.0.0.1","owner":{},"create_time":"2026-01-02T03:04:05Z"}` + "\n",
	}
	for _, v := range valid {
		_, ok := parseAllocValue([]byte(v))
		require.False(t, ok, "%s", v)
		var want allocValue
		require.NoError(t, json.Unmarshal([]byte(v), &want), "%s", v)
		got, err := decodeAlloc([]byte(v), 1)
		require.NoError(t, err, "%s", v)
		require.Equal(t, want.Pool, got.Pool)
		require.Equal(t, want.Owner.Name, got.Owner.Name)
	}
	invalid := []string{
		``,
		`{`,
		`{"pool":"p","address":"10.0.0.300","owner":{},"create_time":"2026-01-02T03:04:05Z"}`,
		`{"pool":"p","address":"10.0.0.1","owner":{},"create_time":"yesterday"}`,
		`{"pool":"p","address":"10.0.0.1","owner":{},"create_time":"2026-01-02T03:04:05Z"}}`,
		`{"pool":"p","address":"10.0.0.1","owner":{"uid":"u","name":"n"}`,
	}
	for _, v := range invalid {
		_, ok := parseAllocValue([]byte(v))
		require.False(t, ok, "%s", v)
		_, err := decodeAlloc([]byte(v), 1)
		require.Error(t, err, "%s", v)
	}
}

// FuzzParseAllocValue: whatever the bytes, the direct path either declines
// or reads exactly what encoding/json reads, and never accepts what
// encoding/json refuses.
func FuzzParseAllocValue(f *testing.F) {
	for _, a := range sampleAllocs() {
		f.Add([]byte(encodeAlloc(&a)))
	}
	f.Add([]byte(`{"pool":"p","address":"","owner":{"cluster":"","uid":"x"},"create_time":"0001-01-01T00:00:00Z","request_id":""}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"owner":{}}`))
	f.Fuzz(func(t *testing.T, v []byte) {
		got, ok := parseAllocValue(v)
		if !ok {
			return
		}
		var want allocValue
		if err := json.Unmarshal(v, &want); err != nil {
			t.Fatalf("accepted %q, which encoding/json refuses: %v", v, err)
		}
		if !got.CreateTime.Equal(want.CreateTime) || got.CreateTime.Location().String() != want.CreateTime.Location().String() {
			t.Fatalf("%q: time %v, encoding/json %v", v, got.CreateTime, want.CreateTime)
		}
		got.CreateTime, want.CreateTime = time.Time{}, time.Time{}
		require.Equal(t, want, got, "%q", v)
	})
}

// FuzzAllocDecoder: values decoded in turn by one decoder, sharing the
// strings they repeat, come out as each decoded alone, whatever came
// before (a value that fails, one left to encoding/json).
func FuzzAllocDecoder(f *testing.F) {
	vs := sampleAllocs()
	for i := range vs {
		next := vs[(i+1)%len(vs)]
		next.Owner.Name += "x"
		f.Add([]byte(encodeAlloc(&vs[i])), []byte(encodeAlloc(&vs[i])), []byte(encodeAlloc(&next)))
	}
	f.Add([]byte(`{"pool":"p","owner":{"cluster":"a\u0062"}}`), []byte(`{"pool":"p","owner":{"cluster":"ab"}}`), []byte(`{"pool":"q"`))
	f.Fuzz(func(t *testing.T, a, b, c []byte) {
		var dec allocDecoder
		for i, v := range [][]byte{a, b, c, b} {
			want, wantErr := decodeAlloc(v, 3)
			got, err := dec.decode(v, 3)
			require.Equal(t, wantErr == nil, err == nil, "value %d %q", i, v)
			if err == nil {
				require.Equal(t, want, got, "value %d %q", i, v)
			}
		}
	})
}

// TestAllocDecoderSharesRepeatedStrings: in a run of one owner prefix,
// the pool, cluster, kind and namespace are allocated once.
func TestAllocDecoderSharesRepeatedStrings(t *testing.T) {
	a := sampleAllocs()[0]
	var dec allocDecoder
	v := []byte(encodeAlloc(&a))
	_, err := dec.decode(v, 1)
	require.NoError(t, err)
	shared := testing.AllocsPerRun(100, func() { _, _ = dec.decode(v, 1) })
	alone := testing.AllocsPerRun(100, func() { _, _ = decodeAlloc(v, 1) })
	require.Equal(t, alone-4, shared, "the pool, cluster, kind and namespace of the run are not allocated again")
}

// BenchmarkDecodeAlloc: one allocation value as a watch delivers it, read
// directly and by encoding/json.
//
//	go test -run '^$' -bench DecodeAlloc -count 6 ./services/allocator/store/etcd/
func BenchmarkDecodeAlloc(b *testing.B) {
	a := sampleAllocs()[0]
	v := []byte(encodeAlloc(&a))
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			if _, err := decodeAlloc(v, 1); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("direct-in-turn", func(b *testing.B) {
		var dec allocDecoder
		for b.Loop() {
			if _, err := dec.decode(v, 1); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			var av allocValue
			if err := json.Unmarshal(v, &av); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// FuzzEncodeAlloc: the direct encoder writes exactly what encoding/json
// writes for the same allocation, or declines; and what it writes is read
// back by the direct parser.
func FuzzEncodeAlloc(f *testing.F) {
	for _, a := range sampleAllocs() {
		f.Add(a.Pool, a.Address.AsSlice(), a.Owner.Cluster, a.Owner.Kind, a.Owner.Namespace, a.Owner.Name, a.Owner.UID, a.CreateTime.UnixNano(), a.RequestID)
	}
	f.Add("p<", []byte{}, "", "", "", "é", "\x00", int64(-62135596800000000), "")
	f.Add("p", []byte{10, 0, 0, 1}, "c", "", "ns", "", "u", int64(253402300800000000), "r\"")
	f.Fuzz(func(t *testing.T, pool string, addr []byte, cluster, kind, namespace, name, uid string, nanos int64, requestID string) {
		ip, _ := netip.AddrFromSlice(addr)
		a := store.Allocation{Pool: pool, Address: ip, CreateTime: time.Unix(0, nanos).In(time.FixedZone("x", 3600)), RequestID: requestID,
			Owner: decide.Owner{Cluster: cluster, Kind: kind, Namespace: namespace, Name: name, UID: uid}}
		want, err := json.Marshal(allocValueOf(&a))
		got, ok := appendAllocValue(nil, &a)
		if !ok {
			return
		}
		require.NoError(t, err, "encoded what encoding/json refuses: %+v", a)
		require.Equal(t, string(want), string(got))
		require.Equal(t, string(want), encodeAlloc(&a))
		back, ok := parseAllocValue(got)
		require.True(t, ok, "the direct parser declines the direct encoder's %s", got)
		require.Equal(t, a.Owner, decide.Owner{Cluster: back.Owner.Cluster, Kind: back.Owner.Kind, Namespace: back.Owner.Namespace, Name: back.Owner.Name, UID: back.Owner.UID})
		require.True(t, a.CreateTime.Equal(back.CreateTime))
	})
}

// TestEncodeAllocDirect: the allocations a cluster makes take the direct
// path; one that needs escaping is left to encoding/json, the same bytes.
func TestEncodeAllocDirect(t *testing.T) {
	for _, a := range sampleAllocs() {
		_, ok := appendAllocValue(nil, &a)
		require.True(t, ok, "%+v", a)
	}
	a := sampleAllocs()[0]
	a.Owner.Name = "web<1>"
	_, ok := appendAllocValue(nil, &a)
	require.False(t, ok)
	require.JSONEq(t, `{"pool":"scale","address":"10.1.2.3","owner":{"cluster":"east","kind":"Service","namespace":"shop","name":"web\u003c1\u003e","uid":"4f6c"},"create_time":"2026-11-23T16:30:01.123456789Z","request_id":"req-1"}`, encodeAlloc(&a))
}

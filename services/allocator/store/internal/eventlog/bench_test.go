package eventlog

import (
	"fmt"
	"math"
	"net/netip"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/plexusnet/plexus/services/allocator/decide"
	"github.com/plexusnet/plexus/services/allocator/store"
)

// benchEvent is an allocation event as a store makes one from a request:
// its strings each allocated apart, as a protobuf decoder leaves them.
func benchEvent(i int) store.Event {
	rev := int64(i + 1)
	return store.Event{Type: store.EventPutAllocation, Revision: rev, Allocation: &store.Allocation{
		Pool: fmt.Sprint("pool-", i%4), Address: netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}),
		Owner: decide.Owner{
			Cluster: fmt.Sprint("cluster-", i%3), Kind: fmt.Sprint("Pod"), Namespace: fmt.Sprint("payments-", i%7),
			Name: fmt.Sprintf("checkout-7d9f8b6c5-%05d", i), UID: fmt.Sprintf("3f2b8c1e-5d4a-4c3b-9e8f-%012d", i),
		},
		CreateTime: time.Unix(1_700_000_000+int64(i), 0), RequestID: fmt.Sprintf("req-%08d", i), Revision: rev,
	}}
}

// heapNow is the live heap after a collection, and the part of it the
// collector scans.
func heapNow() (live, scan uint64) {
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/scan/heap:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64(), s[1].Value.Uint64()
}

// BenchmarkHistory measures the event history at its default size: what
// an append costs per event (one commit of one event per op), the heap a
// full history holds per event and how much of it the collector scans,
// and what appending and reading an event cost with a cursor at the head
// and with one half the history behind it.
func BenchmarkHistory(b *testing.B) {
	const full = DefaultCapacity
	b.Run("append", func(b *testing.B) {
		evs := make([]store.Event, full)
		for i := range evs {
			evs[i] = benchEvent(i)
		}
		b.ReportAllocs()
		b.ResetTimer()
		l := New(full, 0)
		for i := range b.N {
			ev := evs[i%full]
			ev.Revision = int64(i + 1)
			l.Append([]store.Event{ev})
		}
	})
	b.Run("held", func(b *testing.B) {
		for range b.N { // -benchtime 1x: each op fills a history
			l := New(full, 0)
			live0, scan0 := heapNow()
			for i := range full {
				l.Append([]store.Event{benchEvent(i)})
			}
			live, scan := heapNow()
			b.ReportMetric(float64(live-live0)/full, "heap-B/event")
			b.ReportMetric(float64(scan-scan0)/full, "scan-B/event")
			runtime.KeepAlive(l)
		}
	})
	// Each op appends one event and reads one, behind events after it.
	read := func(b *testing.B, behind int) {
		evs := make([]store.Event, full)
		for i := range evs {
			evs[i] = benchEvent(i)
		}
		l := New(full, 0)
		for i := range behind {
			l.Append([]store.Event{evs[i]})
		}
		c, err := l.Cursor(0, "")
		if err != nil {
			b.Fatal(err)
		}
		buf := make([]store.Event, 0, 1)
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			ev := evs[(behind+i)%full]
			ev.Revision = int64(behind + i + 1)
			l.Append([]store.Event{ev})
			if buf, err = c.Next(b.Context(), buf[:0]); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("read-head", func(b *testing.B) { read(b, 0) })
	b.Run("read-behind", func(b *testing.B) { read(b, full/2) })
}

// BenchmarkReplay measures watches that start together from the same
// revision, 20,000 events back (a burst of watches sent a snapshot a
// moment old while allocations go on): each op is one event read by every
// one of 100 cursors.
func BenchmarkReplay(b *testing.B) {
	const cursors, behind = 100, 20_000
	n := behind + b.N
	l := newLog(n, math.MaxInt, 0) // keeps every event the cursors read
	for i := range n {
		l.Append([]store.Event{benchEvent(i)})
	}
	cs := make([]*Cursor, cursors)
	for i := range cs {
		c, err := l.Cursor(int64(n-behind-b.N), "")
		if err != nil {
			b.Fatal(err)
		}
		cs[i] = c
	}
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Go(func() {
			buf := make([]store.Event, 0, 32)
			for got := 0; got < b.N; got += len(buf) {
				var err error
				if buf, err = c.Next(b.Context(), buf[:0]); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

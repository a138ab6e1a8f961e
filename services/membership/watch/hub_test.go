package watch_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/services/membership/watch"
)

func key(ns, name string) watch.Key { return watch.Key{Namespace: ns, Name: name} }

func upsert(k watch.Key, v string, exported bool) watch.Change[string] {
	return watch.Change[string]{Key: k, Present: true, Value: v, Exported: exported}
}

func del(k watch.Key) watch.Change[string] { return watch.Change[string]{Key: k} }

// ev is an event reduced to what the tests compare.
type ev struct {
	Type watch.EventType
	Key  watch.Key
	V    string
	Rev  uint64
}

func reduce(evs []watch.Event[string]) []ev {
	out := make([]ev, 0, len(evs))
	for _, e := range evs {
		out = append(out, ev{e.Type, e.Key, e.Value, e.Revision})
	}
	return out
}

func drain(s *watch.Subscription[string]) []ev {
	return reduce(s.Next(nil, 1<<20))
}

func TestSnapshotThenChanges(t *testing.T) {
	h := watch.New[string]()
	a, b := key("ns1", "a"), key("ns1", "b")
	require.Equal(t, uint64(1), h.Publish(upsert(b, "b1", false)))
	require.Equal(t, uint64(2), h.Publish(upsert(a, "a1", true)))

	s := h.Subscribe(watch.Filter{}, watch.Position{})
	defer s.Close()
	require.False(t, s.Resumed())
	require.Equal(t, []ev{
		{watch.SnapshotStart, watch.Key{}, "", 2},
		{watch.Upsert, a, "a1", 2},
		{watch.Upsert, b, "b1", 2},
		{watch.SnapshotEnd, watch.Key{}, "", 2},
	}, reduce(s.Snapshot()))
	require.Empty(t, drain(s))

	h.Publish(upsert(a, "a2", true))
	h.Publish(del(b))
	select {
	case <-s.Ready():
	default:
		t.Fatal("no signal after a publish")
	}
	require.Equal(t, []ev{{watch.Upsert, a, "a2", 3}, {watch.Delete, b, "", 4}}, drain(s))
}

func TestDeletingUnknownServiceIsDropped(t *testing.T) {
	h := watch.New[string]()
	s := h.Subscribe(watch.Filter{}, watch.Position{})
	require.Equal(t, uint64(0), h.Publish(del(key("ns", "ghost"))))
	require.Empty(t, drain(s))
	h.Publish(upsert(key("ns", "a"), "x", false))
	h.Publish(del(key("ns", "a")))
	require.Equal(t, uint64(2), h.Publish(del(key("ns", "a"))), "a second deletion is dropped too")
}

func TestCoalescingKeepsRevisionsIncreasing(t *testing.T) {
	h := watch.New[string]()
	s := h.Subscribe(watch.Filter{}, watch.Position{})
	a, b := key("ns", "a"), key("ns", "b")
	for i := range 100 {
		h.Publish(upsert(a, fmt.Sprint("a", i), false))
	}
	h.Publish(upsert(b, "b0", false))
	h.Publish(upsert(a, "last", false))
	require.Equal(t, 2, s.Pending(), "a burst to one service waits as one entry")
	require.Equal(t, []ev{{watch.Upsert, b, "b0", 101}, {watch.Upsert, a, "last", 102}}, drain(s),
		"a replaced entry moves to the back, so revisions never go down")
}

func TestNextHonoursMax(t *testing.T) {
	h := watch.New[string]()
	s := h.Subscribe(watch.Filter{}, watch.Position{})
	for i := range 5 {
		h.Publish(upsert(key("ns", fmt.Sprint(i)), "v", false))
	}
	<-s.Ready()
	require.Len(t, s.Next(nil, 2), 2)
	select {
	case <-s.Ready():
	default:
		t.Fatal("events left behind must signal again")
	}
	require.Len(t, drain(s), 3)
}

func TestResume(t *testing.T) {
	h := watch.New[string](watch.WithEpoch("e1"), watch.WithHistory(8))
	a, b, c := key("ns", "a"), key("ns", "b"), key("ns", "c")
	h.Publish(upsert(a, "a1", false)) // 1
	h.Publish(upsert(b, "b1", false)) // 2
	h.Publish(upsert(a, "a2", false)) // 3
	h.Publish(upsert(c, "c1", false)) // 4
	h.Publish(del(b))                 // 5

	tests := []struct {
		name    string
		from    watch.Position
		resumed bool
		want    []ev
	}{
		{"missed everything after 2", watch.Position{Epoch: "e1", Revision: 2},
			true, []ev{{watch.Upsert, a, "a2", 3}, {watch.Upsert, c, "c1", 4}, {watch.Delete, b, "", 5}}},
		{"missed only the deletion", watch.Position{Epoch: "e1", Revision: 4},
			true, []ev{{watch.Delete, b, "", 5}}},
		{"missed nothing", watch.Position{Epoch: "e1", Revision: 5}, true, []ev{}},
		{"other epoch", watch.Position{Epoch: "e0", Revision: 2}, false, nil},
		{"revision from the future", watch.Position{Epoch: "e1", Revision: 6}, false, nil},
		{"no position", watch.Position{Epoch: "e1"}, false, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := h.Subscribe(watch.Filter{}, tc.from)
			defer s.Close()
			require.Equal(t, tc.resumed, s.Resumed())
			if !tc.resumed {
				require.Equal(t, []ev{
					{watch.SnapshotStart, watch.Key{}, "", 5},
					{watch.Upsert, a, "a2", 5},
					{watch.Upsert, c, "c1", 5},
					{watch.SnapshotEnd, watch.Key{}, "", 5},
				}, reduce(s.Snapshot()))
				return
			}
			require.Nil(t, s.Snapshot())
			require.Equal(t, tc.want, drain(s))
		})
	}
}

func TestResumeTooOldGetsSnapshot(t *testing.T) {
	h := watch.New[string](watch.WithEpoch("e"), watch.WithHistory(4))
	gone := key("ns", "gone")
	h.Publish(upsert(gone, "x", false)) // 1
	h.Publish(del(gone))                // 2
	for i := range 4 {                  // 3..6 push 1 and 2 out
		h.Publish(upsert(key("ns", fmt.Sprint(i)), "v", false))
	}
	s := h.Subscribe(watch.Filter{}, watch.Position{Epoch: "e", Revision: 1})
	require.False(t, s.Resumed(), "revision 2 left the history")
	require.Len(t, s.Snapshot(), 6)

	s = h.Subscribe(watch.Filter{}, watch.Position{Epoch: "e", Revision: 2})
	require.True(t, s.Resumed(), "everything after 2 is still there")
	require.Len(t, drain(s), 4)
	_, _, _, _, ok := h.Get(gone)
	require.False(t, ok)
}

func TestResumeLargerThanMaxPendingGetsSnapshot(t *testing.T) {
	h := watch.New[string](watch.WithEpoch("e"), watch.WithMaxPending(3))
	for i := range 5 {
		h.Publish(upsert(key("ns", fmt.Sprint(i)), "v", false))
	}
	require.False(t, h.Subscribe(watch.Filter{}, watch.Position{Epoch: "e", Revision: 1}).Resumed())
	require.True(t, h.Subscribe(watch.Filter{}, watch.Position{Epoch: "e", Revision: 2}).Resumed())
}

func TestFilters(t *testing.T) {
	h := watch.New[string](watch.WithEpoch("e"))
	web, db, other := key("shop", "web"), key("shop", "db"), key("lab", "web")
	exp := h.Subscribe(watch.Filter{ExportedOnly: true}, watch.Position{})
	ns := h.Subscribe(watch.Filter{Namespace: "shop"}, watch.Position{})
	both := h.Subscribe(watch.Filter{Namespace: "shop", ExportedOnly: true}, watch.Position{})

	h.Publish(upsert(web, "w1", false))  // 1
	h.Publish(upsert(db, "d1", true))    // 2
	h.Publish(upsert(other, "o1", true)) // 3
	h.Publish(upsert(web, "w2", true))   // 4: web exported
	h.Publish(upsert(web, "w3", false))  // 5: web unexported
	h.Publish(upsert(web, "w4", false))  // 6: changed while unexported

	require.Equal(t, []ev{
		{watch.Upsert, db, "d1", 2},
		{watch.Upsert, other, "o1", 3},
		{watch.Delete, web, "", 5},
	}, drain(exp), "an export that goes away is a deletion; changes while unexported are not sent")
	require.Equal(t, []ev{
		{watch.Upsert, db, "d1", 2},
		{watch.Upsert, web, "w4", 6},
	}, drain(ns))
	require.Equal(t, []ev{
		{watch.Upsert, db, "d1", 2},
		{watch.Delete, web, "", 5},
	}, drain(both))

	h.Publish(upsert(web, "w5", true)) // 7: exported again
	require.Equal(t, []ev{{watch.Upsert, web, "w5", 7}}, drain(exp))

	t.Run("resume sends what changed since, as it is now, through the filter", func(t *testing.T) {
		s := h.Subscribe(watch.Filter{ExportedOnly: true}, watch.Position{Epoch: "e", Revision: 3})
		require.Equal(t, []ev{{watch.Upsert, web, "w5", 7}}, drain(s))
		h.Publish(upsert(web, "w6", false)) // 8
		s = h.Subscribe(watch.Filter{ExportedOnly: true}, watch.Position{Epoch: "e", Revision: 7})
		require.Equal(t, []ev{{watch.Delete, web, "", 8}}, drain(s))
		// Unexported at 5 and at 8, but whether the subscriber saw it
		// exported in between cannot be told (see
		// TestResumeAfterCoalescedChanges): a Delete, harmless if not.
		s = h.Subscribe(watch.Filter{ExportedOnly: true}, watch.Position{Epoch: "e", Revision: 5})
		require.Equal(t, []ev{{watch.Delete, web, "", 8}}, drain(s))
		// Another namespace is never the subscriber's business.
		h.Publish(del(other)) // 9
		s = h.Subscribe(watch.Filter{Namespace: "shop"}, watch.Position{Epoch: "e", Revision: 8})
		require.Empty(t, drain(s))
	})
}

// TestResumeAfterCoalescedChanges: a subscriber's queue sends a Service
// changed again while it waited at its latest revision, after Services
// changed in between; the subscriber may then hold a revision newer than
// a change it has not received. Resuming from there still brings it up to
// date: here it must learn that a is gone.
func TestResumeAfterCoalescedChanges(t *testing.T) {
	h := watch.New[string](watch.WithEpoch("e"))
	a, b := key("ns", "a"), key("ns", "b")
	h.Publish(upsert(a, "a1", true)) // 1
	s := h.Subscribe(watch.Filter{}, watch.Position{})
	require.Len(t, s.Snapshot(), 3, "a between the snapshot's start and end")

	h.Publish(del(a))                // 2
	h.Publish(upsert(b, "b1", true)) // 3
	h.Publish(upsert(a, "a2", true)) // 4
	h.Publish(del(a))                // 5
	require.Equal(t, []ev{{watch.Upsert, b, "b1", 3}}, reduce(s.Next(nil, 1)),
		"b first: a's queued deletion went behind it when a changed again")
	s.Close() // the stream breaks here

	r := h.Subscribe(watch.Filter{}, watch.Position{Epoch: "e", Revision: 3})
	require.True(t, r.Resumed())
	require.Equal(t, []ev{{watch.Delete, a, "", 5}}, drain(r))
}

func TestTooManyPendingEndsSubscription(t *testing.T) {
	h := watch.New[string](watch.WithMaxPending(3))
	slow := h.Subscribe(watch.Filter{}, watch.Position{})
	fast := h.Subscribe(watch.Filter{}, watch.Position{})
	for i := range 4 {
		h.Publish(upsert(key("ns", fmt.Sprint(i)), "v", false))
		drain(fast)
	}
	select {
	case <-slow.Done():
	default:
		t.Fatal("slow subscriber still open")
	}
	require.ErrorIs(t, slow.Err(), watch.ErrTooSlow)
	require.Empty(t, drain(slow))
	require.NoError(t, fast.Err())
	require.Equal(t, 1, h.Subscribers())
}

func TestLagEndsSubscription(t *testing.T) {
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	h := watch.New[string](watch.WithMaxLag(time.Minute), watch.WithClock(clock))
	s := h.Subscribe(watch.Filter{}, watch.Position{})
	a := key("ns", "a")

	h.Publish(upsert(a, "1", false))
	advance(50 * time.Second)
	drain(s)
	advance(50 * time.Second)
	h.Publish(upsert(a, "2", false))
	advance(50 * time.Second)
	h.Publish(upsert(a, "3", false))
	require.NoError(t, s.Err(), "a subscriber that keeps draining is never too slow")

	advance(11 * time.Second)
	h.Publish(upsert(a, "4", false))
	require.ErrorIs(t, s.Err(), watch.ErrTooSlow, "a queue untouched for over a minute")
}

func TestClose(t *testing.T) {
	h := watch.New[string]()
	s := h.Subscribe(watch.Filter{}, watch.Position{})
	s.Close()
	s.Close()
	require.ErrorIs(t, s.Err(), watch.ErrClosed)
	require.Equal(t, 0, h.Subscribers())
	h.Publish(upsert(key("ns", "a"), "v", false))
	require.Empty(t, drain(s))
}

// view is what a client rebuilds from the events it receives.
type view struct {
	rev  uint64
	data map[watch.Key]string
	// snap is the snapshot being received, applied at its end.
	snap map[watch.Key]string
}

// apply applies evs, or says how they break the order a client relies
// on. It returns an error rather than ending the test, so a reader
// goroutine can use it too.
func (v *view) apply(evs []watch.Event[string]) error {
	for _, e := range evs {
		switch e.Type {
		case watch.SnapshotStart:
			if v.snap != nil {
				return fmt.Errorf("revision %d: snapshots do not nest", e.Revision)
			}
			v.snap = map[watch.Key]string{}
		case watch.SnapshotEnd:
			if e.Revision < v.rev {
				return fmt.Errorf("snapshot ends at revision %d, before %d", e.Revision, v.rev)
			}
			v.data, v.snap, v.rev = v.snap, nil, e.Revision
		case watch.Upsert:
			if v.snap != nil {
				v.snap[e.Key] = e.Value
				continue
			}
			if e.Revision <= v.rev {
				return fmt.Errorf("upsert of %v at revision %d after %d: revisions increase", e.Key, e.Revision, v.rev)
			}
			v.data[e.Key] = e.Value
			v.rev = e.Revision
		case watch.Delete:
			if e.Revision <= v.rev {
				return fmt.Errorf("delete of %v at revision %d after %d: revisions increase", e.Key, e.Revision, v.rev)
			}
			delete(v.data, e.Key)
			v.rev = e.Revision
		}
	}
	return nil
}

// TestRandomHistories publishes random changes while subscribers of every
// filter drain at random, disconnect and resume, and checks that each one's
// view ends equal to the filtered state.
func TestRandomHistories(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 7))
			h := watch.New[string](watch.WithHistory(1+r.IntN(64)), watch.WithMaxPending(1+r.IntN(8)))
			keys := []watch.Key{key("a", "x"), key("a", "y"), key("b", "x"), key("b", "z")}
			type state struct {
				v        string
				exported bool
			}
			truth := map[watch.Key]state{}
			filters := []watch.Filter{{}, {Namespace: "a"}, {ExportedOnly: true}, {Namespace: "b", ExportedOnly: true}}
			views := make([]*view, len(filters))
			subs := make([]*watch.Subscription[string], len(filters))
			open := func(i int) {
				s := h.Subscribe(filters[i], watch.Position{Epoch: h.Epoch(), Revision: views[i].rev})
				require.NoError(t, views[i].apply(s.Snapshot()))
				subs[i] = s
			}
			for i := range filters {
				views[i] = &view{data: map[watch.Key]string{}}
				open(i)
			}
			for step := range 400 {
				k := keys[r.IntN(len(keys))]
				if r.IntN(4) == 0 {
					h.Publish(del(k))
					delete(truth, k)
				} else {
					st := state{v: fmt.Sprint(step), exported: r.IntN(2) == 0}
					h.Publish(upsert(k, st.v, st.exported))
					truth[k] = st
				}
				for i, s := range subs {
					switch r.IntN(6) {
					case 0:
						s.Close()
						open(i)
					case 1, 2:
						if s.Err() != nil {
							open(i)
							continue
						}
						require.NoError(t, views[i].apply(s.Next(nil, 1+r.IntN(3))))
					}
				}
			}
			for i, f := range filters {
				if subs[i].Err() != nil {
					open(i)
				}
				require.NoError(t, views[i].apply(subs[i].Next(nil, 1<<20)))
				want := map[watch.Key]string{}
				for k, st := range truth {
					if (f.Namespace == "" || f.Namespace == k.Namespace) && (!f.ExportedOnly || st.exported) {
						want[k] = st.v
					}
				}
				require.Equal(t, want, views[i].data, "filter %+v", f)
			}
		})
	}
}

// TestConcurrentPublishers checks, under the race detector, that publishers
// and subscribers may run at once and that nobody waits for a subscriber
// that never reads.
func TestConcurrentPublishers(t *testing.T) {
	h := watch.New[string](watch.WithMaxPending(1 << 20))
	stuck := h.Subscribe(watch.Filter{}, watch.Position{})
	reader := h.Subscribe(watch.Filter{}, watch.Position{})
	var wg sync.WaitGroup
	for p := range 4 {
		wg.Go(func() {
			for i := range 500 {
				h.Publish(upsert(key("ns", fmt.Sprint(p, "-", i%50)), fmt.Sprint(i), false))
			}
		})
	}
	v := &view{data: map[watch.Key]string{}}
	stop := make(chan struct{})
	readerDone := make(chan error, 1)
	go func() {
		for {
			select {
			case <-reader.Ready():
				if err := v.apply(reader.Next(nil, 16)); err != nil {
					readerDone <- err
					return
				}
			case <-stop:
				readerDone <- v.apply(reader.Next(nil, 1<<20))
				return
			}
		}
	}()
	wg.Wait()
	close(stop)
	require.NoError(t, <-readerDone)
	require.Len(t, v.data, 200)
	require.Equal(t, h.Revision(), v.rev)
	require.Equal(t, 200, stuck.Pending())
	keys := make([]watch.Key, 0, len(v.data))
	for k := range v.data {
		keys = append(keys, k)
	}
	require.True(t, slices.ContainsFunc(keys, func(k watch.Key) bool { return k.Name == "3-49" }))
}

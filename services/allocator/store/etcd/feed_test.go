package etcd_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/internal/testing/kubetest"
	"github.com/plexusnet/plexus/services/allocator/decide"
	"github.com/plexusnet/plexus/services/allocator/internal/storetest"
	"github.com/plexusnet/plexus/services/allocator/store"
	"github.com/plexusnet/plexus/services/allocator/store/etcd"
)

// etcdWatchers is how many watchers etcd itself serves, from its metrics.
func etcdWatchers(t *testing.T, e *kubetest.Etcd) int {
	t.Helper()
	resp, err := http.Get(e.Endpoint() + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "etcd_debugging_mvcc_watcher_total "); ok {
			n, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			return int(n)
		}
	}
	require.NoError(t, sc.Err())
	require.FailNow(t, "etcd reports no etcd_debugging_mvcc_watcher_total")
	return 0
}

// TestWatchesShareOneEtcdWatch: 40 watches of one store, half read as
// channels and half as cursors, cost etcd one watcher, and each gets every
// event of the commits after it, in order, with Last on each revision's
// last; a watch from 0 (the whole history, before the shared one) gets one
// of its own. With the shared watch turned off, each watch costs etcd a
// watcher: what the metric would show if sharing broke.
func TestWatchesShareOneEtcdWatch(t *testing.T) {
	e := kubetest.StartEtcd(t)
	for _, c := range []struct {
		name    string
		history int
		etcd    int // watchers etcd serves for the 40 watches
	}{
		{"shared", 0, 1},
		{"own", -1, 40},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			base := etcdWatchers(t, e)
			s := openWith(t, e, etcd.Config{Prefix: freshPrefix(), History: c.history})
			rev, err := s.Commit(ctx, store.Txn{Ops: []store.Op{{Kind: store.OpPutPool, Pool: &store.Pool{ID: "p", CIDRs: []string{"10.0.0.0/24"}}}}})
			require.NoError(t, err)

			const watches, commits = 40, 10
			var cursors []store.Cursor
			for i := range watches {
				if i%2 == 0 {
					ch, err := storetest.Watch(ctx, s, rev)
					require.NoError(t, err)
					cursors = append(cursors, store.ChanCursor(ch))
				} else {
					c, err := s.WatchCursor(ctx, rev, "")
					require.NoError(t, err)
					cursors = append(cursors, c)
				}
			}
			require.Eventually(t, func() bool { return etcdWatchers(t, e)-base == c.etcd }, 10*time.Second, 20*time.Millisecond,
				"etcd serves %d watchers for %d watches", c.etcd, watches)

			var want []int64
			for i := range commits {
				a := &store.Allocation{Pool: "p", Address: netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}), Owner: decide.Owner{Kind: "Pod", Name: fmt.Sprint("x", i)}}
				r, err := s.Commit(ctx, store.Txn{Ops: []store.Op{{Kind: store.OpPutAllocation, Allocation: a}}})
				require.NoError(t, err)
				want = append(want, r)
			}
			for i, c := range cursors {
				var got []int64
				buf := make([]store.Event, 0, 4)
				for len(got) < commits {
					var err error
					buf, err = c.Next(ctx, buf[:0])
					require.NoError(t, err, "watch %d", i)
					for _, ev := range buf {
						require.True(t, ev.Last, "one event per commit")
						require.Equal(t, netip.AddrFrom4([4]byte{10, 0, 0, byte(len(got) + 1)}), ev.Allocation.Address)
						got = append(got, ev.Revision)
					}
				}
				require.Equal(t, want, got, "watch %d", i)
			}

			all, err := storetest.Watch(ctx, s, 0)
			require.NoError(t, err)
			require.Eventually(t, func() bool { return etcdWatchers(t, e)-base == c.etcd+1 }, 10*time.Second, 20*time.Millisecond,
				"a watch of the whole history has an etcd watch of its own")
			for range commits + 1 {
				select {
				case ev := <-all:
					require.NoError(t, ev.Err)
				case <-ctx.Done():
					require.FailNow(t, "the watch from 0 did not deliver the history")
				}
			}
			require.NoError(t, s.Close())
			require.Eventually(t, func() bool { return etcdWatchers(t, e) == base }, 10*time.Second, 20*time.Millisecond,
				"closing the store ends its etcd watches")
		})
	}
}

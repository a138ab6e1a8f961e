package bolt

import (
	"bytes"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	bbolt "go.etcd.io/bbolt"

	"github.com/plexusnet/plexus/services/allocator/store"
)

// testRetention is a request retention short enough for tests to wait
// out.
const testRetention = 500 * time.Millisecond

// withRequestRetention sets how long the store keeps request records,
// for tests that cannot wait store.DefaultRequestRetention.
func withRequestRetention(d time.Duration) Option {
	return func(o *options) { o.requestRetention = d }
}

func putRequest(id string) store.Txn {
	return store.Txn{
		Conds: []store.Cond{{Kind: store.CondRequestAbsent, RequestID: id}},
		Ops:   []store.Op{{Kind: store.OpPutRequest, Request: &store.Request{ID: id, Allocations: []string{"p/10.0.0.1"}}}},
	}
}

func requestPresent(t *testing.T, s store.Store, id string) bool {
	t.Helper()
	_, ok, err := s.GetRequest(t.Context(), id)
	require.NoError(t, err)
	return ok
}

// requireKept checks that request ids stay recorded until retention
// after since, then waits until they are dropped.
func requireKept(t *testing.T, s store.Store, since time.Time, ids ...string) {
	t.Helper()
	missing := func() bool {
		return slices.ContainsFunc(ids, func(id string) bool { return !requestPresent(t, s, id) })
	}
	require.Never(t, missing, testRetention-time.Since(since), testRetention/50, "dropped early")
	require.Eventually(t, func() bool {
		return !slices.ContainsFunc(ids, func(id string) bool { return requestPresent(t, s, id) })
	}, 10*time.Second, testRetention/50, "not dropped")
}

func requestCount(t *testing.T, s *Store) int {
	t.Helper()
	var n int
	require.NoError(t, s.db.View(func(tx *bbolt.Tx) error {
		n = tx.Bucket(bucketRequests).Stats().KeyN
		return nil
	}))
	return n
}

// TestRequestRetentionAcrossReopen: a record's age counts from the commit
// that put it, not from the latest open, and dropping it takes no
// revision and leaves nothing in the file.
func TestRequestRetentionAcrossReopen(t *testing.T) {
	s := openTemp(t, withRequestRetention(testRetention))
	start := time.Now()
	rev, err := s.Commit(t.Context(), putRequest("r1"))
	require.NoError(t, err)
	s2 := reopen(t, s, withRequestRetention(testRetention)).(*Store)

	requireKept(t, s2, start, "r1")
	snap, err := s2.Snapshot(t.Context())
	require.NoError(t, err)
	require.Equal(t, rev, snap.Revision, "dropping a record takes no revision")
	require.Zero(t, requestCount(t, s2))
}

func commitRequests(t *testing.T, s *Store, ids ...string) int64 {
	t.Helper()
	var tx store.Txn
	for _, id := range ids {
		tx.Ops = append(tx.Ops, store.Op{Kind: store.OpPutRequest, Request: &store.Request{ID: id}})
	}
	rev, err := s.Commit(t.Context(), tx)
	require.NoError(t, err)
	return rev
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%04d", prefix, i)
	}
	return out
}

// TestSweepIsBounded: the sweeper looks at most at scan records a read
// transaction and deletes at most limit a write transaction, and only
// those put by the cutoff; a record put again since it was read stays.
func TestSweepIsBounded(t *testing.T) {
	s := openTemp(t)
	commitRequests(t, s, ids("a", 300)...)
	old := time.Now()
	commitRequests(t, s, ids("b", 100)...) // newer, between the old ones in key order
	commitRequests(t, s, ids("c", 100)...)

	var got [][]byte
	var from []byte
	reads := 0
	for {
		var batch [][]byte
		require.NoError(t, s.db.View(func(tx *bbolt.Tx) error {
			var err error
			batch, from, err = collectExpired(tx, from, old, 150, 128)
			return err
		}))
		reads++
		require.LessOrEqual(t, len(batch), 128)
		got = append(got, batch...)
		if from == nil {
			break
		}
	}
	require.Len(t, got, 300)
	require.Equal(t, 4, reads, "128, 128, 44 and the scan bound, the rest")
	for _, id := range got {
		require.True(t, bytes.HasPrefix(id, []byte("a")), "%s", id)
	}

	again := commitRequests(t, s, "a0007")
	require.NoError(t, s.db.Update(func(tx *bbolt.Tx) error {
		n, err := deleteExpired(tx, got, old)
		require.Equal(t, 299, n, "the record put again is kept")
		return err
	}))
	require.Equal(t, 201, requestCount(t, s))
	r, ok, err := s.GetRequest(t.Context(), "a0007")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, again, r.Revision)
}

// TestExpiredObserver: the sweeper reports every record it drops, once.
func TestExpiredObserver(t *testing.T) {
	var mu sync.Mutex
	observed := 0
	s, err := Open(filepath.Join(t.TempDir(), "observed.db"), withRequestRetention(testRetention), WithExpiredObserver(func(n int) {
		mu.Lock()
		defer mu.Unlock()
		observed += n
	}))
	require.NoError(t, err)
	defer s.Close()
	commitRequests(t, s, ids("x", 40)...)
	// The sweeper reports after its transaction commits, so the records can
	// be gone a moment before the observer hears of them.
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return observed >= 40
	}, 10*time.Second, testRetention/50)
	require.Zero(t, requestCount(t, s))
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 40, observed)
}

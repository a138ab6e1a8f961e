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

func marks(t *testing.T, s *Store) []revMark {
	t.Helper()
	var m []revMark
	require.NoError(t, s.db.View(func(tx *bbolt.Tx) error {
		var err error
		m, err = readMarks(tx.Bucket(bucketMeta))
		return err
	}))
	return m
}

// TestMarkRevision: a mark is written when commits came since the last
// one and that one is a span old.
func TestMarkRevision(t *testing.T) {
	s := openTemp(t) // spans of an hour: the sweeper writes no mark
	tx, err := s.db.Begin(true)
	require.NoError(t, err)
	defer func() { require.NoError(t, tx.Rollback()) }()
	meta := tx.Bucket(bucketMeta)
	t0 := time.Now()
	for i, step := range []struct {
		rev  int64
		at   time.Time
		want int
	}{
		{0, t0, 0},                       // nothing committed yet
		{5, t0, 1},                       // the first mark
		{6, t0.Add(59 * time.Minute), 1}, // less than a span since
		{5, t0.Add(2 * time.Hour), 1},    // no commit since
		{7, t0.Add(time.Hour), 2},
	} {
		require.NoError(t, putUint64(meta, keyRevision, uint64(step.rev)))
		require.NoError(t, markRevision(meta, step.at, time.Hour))
		m, err := readMarks(meta)
		require.NoError(t, err)
		require.Len(t, m, step.want, "step %d", i)
	}
	m, err := readMarks(meta)
	require.NoError(t, err)
	require.Equal(t, []int64{5, 7}, []int64{m[0].rev, m[1].rev})
	require.True(t, m[0].at.Equal(t0))
	require.True(t, m[1].at.Equal(t0.Add(time.Hour)))
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
// those up to the mark's revision; a record put again since it was read
// stays.
func TestSweepIsBounded(t *testing.T) {
	s := openTemp(t)
	old := commitRequests(t, s, ids("a", 300)...)
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

package etcd_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/plexusnet/plexus/internal/testing/kubetest"
	"github.com/plexusnet/plexus/internal/testing/servertest"
	"github.com/plexusnet/plexus/services/allocator/store"
	"github.com/plexusnet/plexus/services/allocator/store/etcd"
)

// olderWriter writes pools as a replica of a version before pools-changed
// did: the pool key and the commit marker, nothing else.
type olderWriter struct {
	cli    *clientv3.Client
	prefix string
}

func newOlderWriter(t *testing.T, e *kubetest.Etcd, prefix string) olderWriter {
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cli.Close() })
	return olderWriter{cli: cli, prefix: prefix}
}

func (o olderWriter) createPool(t *testing.T, id, cidr string) int64 {
	t.Helper()
	value := fmt.Sprintf(`{"id":%q,"cidrs":[%q],"create_time":"2026-01-01T00:00:00Z","update_time":"2026-01-01T00:00:00Z"}`, id, cidr)
	resp, err := o.cli.Txn(t.Context()).Then(
		clientv3.OpPut(o.prefix+"state/pools/"+id, value),
		clientv3.OpPut(o.prefix+"rev/00", ""),
	).Commit()
	require.NoError(t, err)
	return resp.Header.Revision
}

// createGuardedPool commits a pool the way a replica does: guarded by
// CondPoolsUnchangedSince(seen).
func createGuardedPool(ctx context.Context, s *etcd.Store, seen int64, id, cidr string) (int64, error) {
	return s.Commit(ctx, store.Txn{
		Conds: []store.Cond{{Kind: store.CondPoolsUnchangedSince, Revision: seen}, {Kind: store.CondPoolAbsent, Pool: id}},
		Ops:   []store.Op{{Kind: store.OpPutPool, Pool: &store.Pool{ID: id, CIDRs: []string{cidr}}}},
	})
}

// TestAnOlderWriterTurnsThePoolMarksOff: a replica that trusts
// pools-changed and sees a pool change without it (a replica of an older
// version still running) compares every pool key from then on, and says
// so once.
func TestAnOlderWriterTurnsThePoolMarksOff(t *testing.T) {
	e := kubetest.StartEtcd(t)
	prefix := freshPrefix()
	logs := &servertest.Buffer{}
	s := openWith(t, e, etcd.Config{Prefix: prefix, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	ctx := t.Context()

	seen, err := createGuardedPool(ctx, s, 0, "a", "10.0.0.0/24")
	require.NoError(t, err)
	trusted, decided := etcd.TrustsMarks(s)
	require.True(t, decided)
	require.True(t, trusted, "every pool change of this store put pools-changed")
	require.False(t, s.ComparesEveryPoolKey())
	events, err := s.Watch(ctx, seen)
	require.NoError(t, err)
	go func() {
		for range events {
			// drained, so the shared watch goes on
		}
	}()

	// While trusted, a compare of the key alone misses an older
	// writer's pool: the store must notice before it matters again.
	old := newOlderWriter(t, e, prefix)
	oldRev := old.createPool(t, "old", "10.0.1.0/24")
	require.Eventually(t, func() bool {
		trusted, _ := etcd.TrustsMarks(s)
		return !trusted
	}, 10*time.Second, 10*time.Millisecond, "the older writer's pool went unnoticed")
	require.True(t, s.ComparesEveryPoolKey(), "what the metric shows")

	_, err = createGuardedPool(ctx, s, oldRev-1, "b", "10.0.2.0/24")
	require.ErrorIs(t, err, store.ErrConflict, "the older writer's pool was created after the revision")
	_, err = createGuardedPool(ctx, s, oldRev, "b", "10.0.2.0/24")
	require.NoError(t, err)

	old.createPool(t, "old2", "10.0.3.0/24")
	require.Equal(t, 1, strings.Count(logs.String(), "level=WARN"), "one warning, however many such changes:\n%s", logs)
}

// TestPoolMarksAtStart: a store trusts pools-changed when the latest pool
// put carried it, and not when an older version made it, until a pool
// change of its own has put it; pool changes from before the store
// trusted it (a watch from the first revision replays them) do not
// count.
func TestPoolMarksAtStart(t *testing.T) {
	e := kubetest.StartEtcd(t)
	prefix := freshPrefix()
	ctx := t.Context()
	old := newOlderWriter(t, e, prefix)
	oldRev := old.createPool(t, "old", "10.0.0.0/24")

	s := open(t, e, prefix)
	rev, err := createGuardedPool(ctx, s, oldRev, "a", "10.0.1.0/24")
	require.NoError(t, err)
	trusted, decided := etcd.TrustsMarks(s)
	require.True(t, decided)
	require.False(t, trusted, "the latest pool change before it was an older version's")
	require.True(t, s.ComparesEveryPoolKey())
	rev, err = createGuardedPool(ctx, s, rev, "b", "10.0.2.0/24")
	require.NoError(t, err)
	trusted, _ = etcd.TrustsMarks(s)
	require.True(t, trusted, "a's creation put pools-changed")
	require.False(t, s.ComparesEveryPoolKey())

	// Another replica trusts the key at once, and the older change a
	// watch from the start replays is no news.
	s2 := open(t, e, prefix)
	seen, err := createGuardedPool(ctx, s2, rev, "c", "10.0.3.0/24")
	require.NoError(t, err)
	trusted, _ = etcd.TrustsMarks(s2)
	require.True(t, trusted)
	events, err := s2.Watch(ctx, 0)
	require.NoError(t, err)
	for ev := range events {
		if ev.Revision == seen {
			break
		}
	}
	// A later change of this version is checked too, and passes.
	_, err = createGuardedPool(ctx, s2, seen, "d", "10.0.4.0/24")
	require.NoError(t, err)
	for ev := range events {
		if ev.Type == store.EventPutPool && ev.Pool.ID == "d" {
			break
		}
	}
	// The check, queued before the event was delivered, runs beside the
	// watch.
	require.Eventually(t, func() bool { return etcd.MarkChecksIdle(s2) }, 10*time.Second, 10*time.Millisecond)
	trusted, _ = etcd.TrustsMarks(s2)
	require.True(t, trusted, "no pool change here lacked pools-changed")

	// A store that saw no pool at all trusts the key.
	s3 := open(t, e, freshPrefix())
	_, err = createGuardedPool(ctx, s3, 0, "a", "10.0.0.0/24")
	require.NoError(t, err)
	trusted, _ = etcd.TrustsMarks(s3)
	require.True(t, trusted)
}

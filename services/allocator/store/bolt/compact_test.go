package bolt

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/bbolt"

	"github.com/plexusnet/plexus/services/allocator/decide"
	"github.com/plexusnet/plexus/services/allocator/store"
)

// fillForCompact writes a pool with 3,000 allocations and their request
// records, releases every other one (leaving free pages), quarantines
// one, and returns the store's snapshot before it closes.
func fillForCompact(t *testing.T, path string) *store.Snapshot {
	t.Helper()
	s, err := Open(path)
	require.NoError(t, err)
	ctx := t.Context()
	_, err = s.Commit(ctx, store.Txn{Ops: []store.Op{{Kind: store.OpPutPool, Pool: &store.Pool{ID: "p", CIDRs: []string{"10.0.0.0/16"}}}}})
	require.NoError(t, err)
	base := netip.MustParseAddr("10.0.0.1")
	addrs := make([]netip.Addr, 3000)
	for i := range addrs {
		addrs[i] = base
		base = base.Next()
	}
	for i := 0; i < len(addrs); i += 100 {
		var ops []store.Op
		for j, a := range addrs[i : i+100] {
			ops = append(ops, putAlloc(alloc("p", a.String(), fmt.Sprintf("pod-%d", i+j))),
				store.Op{Kind: store.OpPutRequest, Request: &store.Request{ID: fmt.Sprintf("req-%d", i+j), Allocations: []string{"p/" + a.String()}}})
		}
		_, err := s.Commit(ctx, store.Txn{Ops: ops})
		require.NoError(t, err)
	}
	for i := 0; i < len(addrs); i += 2 {
		_, err := s.Commit(ctx, store.Txn{Ops: []store.Op{{Kind: store.OpDeleteAllocation, PoolID: "p", Address: addrs[i]}}})
		require.NoError(t, err)
	}
	_, err = s.Commit(ctx, store.Txn{Ops: []store.Op{{Kind: store.OpPutQuarantine, Quarantine: &store.Quarantine{Pool: "p", Address: addrs[0], Until: time.Unix(2000000000, 0)}}}})
	require.NoError(t, err)
	snap, err := s.Snapshot(ctx)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	return snap
}

func TestCompactKeepsEverythingTheStoreUses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	want := fillForCompact(t, path)
	require.NoError(t, os.WriteFile(path+".compact", []byte("left by an interrupted run"), 0o600))

	res, err := Compact(path, time.Second)
	require.NoError(t, err)
	require.Less(t, res.After, res.Before, "free pages are gone")
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, res.After, fi.Size())
	require.NoFileExists(t, path+".compact")

	s := requireOpensAs(t, path, want)
	req, ok, err := s.GetRequest(t.Context(), "req-1")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, []string{"p/10.0.0.2"}, req.Allocations)
	// The store goes on from the revision, and builds its owner index
	// from the copy.
	rev, err := s.Commit(t.Context(), store.Txn{Ops: []store.Op{putAlloc(alloc("p", "10.0.200.1", "after"))}})
	require.NoError(t, err)
	require.Equal(t, want.Revision+1, rev)
	require.False(t, ownerAbsent(t, s, "p", decide.Owner{Kind: "Pod", Namespace: "ns", Name: "pod-1"}))
	require.True(t, ownerAbsent(t, s, "p", decide.Owner{Kind: "Pod", Namespace: "ns", Name: "pod-0"}))
}

// requireOpensAs opens the store file at path and requires it to hold
// want, in the current format: its allocations as records, and indexes
// of every allocation.
func requireOpensAs(t *testing.T, path string, want *store.Snapshot) *Store {
	t.Helper()
	s, err := Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	got, err := s.Snapshot(t.Context())
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.NoError(t, s.db.View(func(tx *bbolt.Tx) error {
		require.Equal(t, []byte{fileFormat}, tx.Bucket(bucketMeta).Get(keyFormat))
		require.Equal(t, len(want.Allocations), tx.Bucket(bucketRecords).Stats().KeyN)
		return nil
	}))
	require.NoError(t, s.Ready(t.Context()))
	require.Equal(t, len(want.Allocations), s.index.size())
	require.Equal(t, len(want.Allocations), s.index.ownerLen())
	return s
}

func TestCompactRefuses(t *testing.T) {
	dir := t.TempDir()

	// A file in use: the allocator holds its lock.
	path := filepath.Join(dir, "busy.db")
	s, err := Open(path)
	require.NoError(t, err)
	_, err = Compact(path, 50*time.Millisecond)
	require.ErrorContains(t, err, "locked by another process")
	require.NoError(t, s.Close())

	// No file: nothing is created.
	missing := filepath.Join(dir, "missing.db")
	_, err = Compact(missing, time.Second)
	require.Error(t, err)
	require.NoFileExists(t, missing)

	// Another format: the file is left as it was.
	other := filepath.Join(dir, "other.db")
	fillForCompact(t, other)
	db, err := bbolt.Open(other, 0o600, nil)
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bbolt.Tx) error { return tx.Bucket(bucketMeta).Put(keyFormat, []byte{fileFormat + 1}) }))
	require.NoError(t, db.Close())
	before, err := os.ReadFile(other)
	require.NoError(t, err)
	_, err = Compact(other, time.Second)
	require.ErrorContains(t, err, "not a store file of this version")
	after, err := os.ReadFile(other)
	require.NoError(t, err)
	require.Equal(t, before, after)
	require.NoFileExists(t, other+".compact")
}

// TestCompactEmptyStore: a store without allocations keeps every bucket,
// the empty records bucket too.
func TestCompactEmptyStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "empty.db")
	s, err := Open(path)
	require.NoError(t, err)
	require.NoError(t, s.Close())

	res, err := Compact(path, time.Second)
	require.NoError(t, err)
	require.Equal(t, 1, res.Records, "the meta bucket's format")
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true})
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.View(func(tx *bbolt.Tx) error {
		for _, b := range [][]byte{bucketMeta, bucketPools, bucketRecords, bucketQuarantine, bucketRequests} {
			require.NotNil(t, tx.Bucket(b), "bucket %s", b)
		}
		return nil
	}))
}

package memory_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/services/allocator/store"
	"github.com/plexusnet/plexus/services/allocator/store/memory"
)

// TestLeavesNoFile: the store commits and reads like any other, and
// leaves nothing behind in the temporary directory, open or closed.
func TestLeavesNoFile(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	s := memory.New()
	rev, err := s.Commit(t.Context(), store.Txn{Ops: []store.Op{{Kind: store.OpPutPool, Pool: &store.Pool{ID: "p", CIDRs: []string{"10.0.0.0/24"}}}}})
	require.NoError(t, err)
	require.Equal(t, int64(1), rev)
	snap, err := s.Snapshot(t.Context())
	require.NoError(t, err)
	require.Len(t, snap.Pools, 1)
	left, err := filepath.Glob(filepath.Join(os.TempDir(), "*"))
	require.NoError(t, err)
	require.Empty(t, left, "the file has no name once open")
	require.NoError(t, s.Close())

	s = memory.New()
	defer s.Close()
	snap, err = s.Snapshot(t.Context())
	require.NoError(t, err)
	require.Empty(t, snap.Pools, "each store starts empty")
	require.Zero(t, snap.Revision)
}

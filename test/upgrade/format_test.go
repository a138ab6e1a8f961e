package upgrade

import (
	"context"
	"crypto/sha256"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/bbolt"

	allocatorv1 "github.com/plexusnet/plexus/api/allocator/v1"
	"github.com/plexusnet/plexus/internal/testing/proctest"
)

// TestNewerFormatRefused: docs/upgrade.md promises that a build refuses
// a bolt file of a newer format than its own, so a rollback past a
// format change fails loudly instead of misreading the store. A file
// this tree wrote, marked as the next format, is refused by the release
// and by this tree: each exits with an error that names the format it
// found, and the file is left as it was.
func TestNewerFormatRefused(t *testing.T) {
	rel, cur := release(t), current(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	path := filepath.Join(t.TempDir(), "plexus-allocator.db")
	tokens := tokensFile(t)

	a := boltAllocator(t, cur, path, tokens)
	fleet := allocClient(t, a.GRPCAddr, tokenFleet)
	_, err := fleet.CreatePool(ctx, &allocatorv1.CreatePoolRequest{PoolId: "v4", Pool: &allocatorv1.Pool{Cidrs: []string{"10.20.0.0/24"}}})
	require.NoError(t, err)
	_, err = fleet.Allocate(ctx, &allocatorv1.AllocateRequest{Pool: "pools/v4", Owner: &allocatorv1.Owner{Cluster: "a", Kind: "Pod", Namespace: "ns", Name: "web", Uid: "uid-web"}})
	require.NoError(t, err)
	a.Stop()

	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: 10 * time.Second})
	require.NoError(t, err)
	require.NoError(t, db.Update(func(tx *bbolt.Tx) error {
		meta := tx.Bucket([]byte("meta"))
		require.NotNil(t, meta, "the file has its meta bucket")
		require.Equal(t, []byte{4}, meta.Get([]byte("format")), "this tree writes format 4, as the release does")
		return meta.Put([]byte("format"), []byte{5})
	}))
	require.NoError(t, db.Close())
	before := fileSum(t, path)

	for _, b := range []*Build{rel, cur} {
		cmd := exec.CommandContext(ctx, b.Allocator, "--store", "bolt:"+path, "--auth-tokens", tokens,
			"--grpc-addr", proctest.FreeAddr(t), "--http-addr", proctest.FreeAddr(t))
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, "%s must exit on a newer format; it said:\n%s", b.Name, out)
		require.NotZero(t, exit.ExitCode())
		require.Contains(t, string(out), "file format [5]", "%s names the format it found", b.Name)
		require.Equal(t, before, fileSum(t, path), "%s left the file as it was", b.Name)
	}
}

func fileSum(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return sha256.Sum256(b)
}

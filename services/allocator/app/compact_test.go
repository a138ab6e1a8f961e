package app_test

import (
	"bytes"
	"context"
	"io"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/internal/server"
	"github.com/plexusnet/plexus/services/allocator/app"
	"github.com/plexusnet/plexus/services/allocator/decide"
	"github.com/plexusnet/plexus/services/allocator/store"
	"github.com/plexusnet/plexus/services/allocator/store/bolt"
)

// compact runs `plexus-allocator compact args...` and returns its output.
func compact(t *testing.T, env map[string]string, args ...string) (string, error) {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	cmd := server.Command(app.Spec())
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(append([]string{"compact"}, args...))
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

func TestCompactCommand(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.db")
	s, err := bolt.Open(path)
	require.NoError(t, err)
	ctx := t.Context()
	_, err = s.Commit(ctx, store.Txn{Ops: []store.Op{{Kind: store.OpPutPool, Pool: &store.Pool{ID: "p", CIDRs: []string{"10.0.0.0/24"}}}}})
	require.NoError(t, err)
	_, err = s.Commit(ctx, store.Txn{Ops: []store.Op{{Kind: store.OpPutAllocation, Allocation: &store.Allocation{
		Pool: "p", Address: netip.MustParseAddr("10.0.0.9"), Owner: decide.Owner{Kind: "Pod", Namespace: "ns", Name: "a"}}}}})
	require.NoError(t, err)

	// While the allocator runs, the file is not touched.
	_, err = compact(t, nil, "--store", "bolt:"+path, "--lock-timeout", "50ms")
	require.ErrorContains(t, err, "stop the allocator that uses it first")
	want, err := s.Snapshot(ctx)
	require.NoError(t, err)
	require.NoError(t, s.Close())

	// The store comes from PLEXUS_STORE, as the allocator's does.
	out, err := compact(t, map[string]string{"PLEXUS_STORE": "bolt:" + path})
	require.NoError(t, err)
	require.Regexp(t, `^compacted .*a\.db in \S+: [\d.]+ MB -> [\d.]+ MB, \d+ records copied\n$`, out)
	s, err = bolt.Open(path)
	require.NoError(t, err)
	defer s.Close()
	got, err := s.Snapshot(ctx)
	require.NoError(t, err)
	require.Equal(t, want, got)

	_, err = compact(t, nil, "--store", "etcd:http://127.0.0.1:2379")
	require.ErrorContains(t, err, "compact works on a bolt file")
	_, err = compact(t, nil, "--lock-timeout", "0s")
	require.ErrorContains(t, err, "--lock-timeout must be positive")
}

func TestWatchFlagsAreValidated(t *testing.T) {
	for _, args := range [][]string{{"--max-watches=-1"}, {"--watch-snapshot-turns=-1"}} {
		cmd := server.Command(app.Spec())
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		cmd.SetArgs(append(args, "--grpc-addr=127.0.0.1:0", "--http-addr=127.0.0.1:0", "--store=memory"))
		err := cmd.ExecuteContext(t.Context())
		require.ErrorContains(t, err, "must not be negative", "%v", args)
	}
}

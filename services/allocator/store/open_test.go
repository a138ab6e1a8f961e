package store_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/services/allocator/store"
	"github.com/plexusnet/plexus/services/allocator/store/bolt"
	"github.com/plexusnet/plexus/services/allocator/store/memory"
)

func TestOpen(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	tests := []struct {
		name    string
		spec    string
		want    any    // the type of store opened
		file    string // a file the store must create
		wantErr string
	}{
		{name: "default", spec: store.DefaultSpec, want: &bolt.Store{}, file: "plexus-allocator.db"},
		{name: "bolt absolute path", spec: "bolt:" + filepath.Join(dir, "a.db"), want: &bolt.Store{}, file: filepath.Join(dir, "a.db")},
		{name: "bolt path with a colon", spec: "bolt:b:c.db", want: &bolt.Store{}, file: "b:c.db"},
		{name: "memory", spec: "memory", want: &memory.Store{}},
		{name: "memory with argument", spec: "memory:x", wantErr: "takes no argument"},
		{name: "bolt without path", spec: "bolt", wantErr: "needs a file"},
		{name: "bolt with empty path", spec: "bolt:", wantErr: "needs a file"},
		{name: "bolt in missing directory", spec: "bolt:" + filepath.Join(dir, "no", "such", "x.db"), wantErr: "no such file or directory"},
		// Known only to programs that import package etcd.
		{name: "etcd unregistered", spec: "etcd:127.0.0.1:2379", wantErr: `unknown kind "etcd"`},
		{name: "unknown", spec: "redis:x", wantErr: `unknown kind "redis" (known: bolt, memory)`},
		{name: "empty", spec: "", wantErr: "empty"},
		{name: "case matters", spec: "Bolt:x.db", wantErr: "unknown kind"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := store.Open(tc.spec, store.WithHistory(10))
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				require.ErrorContains(t, err, tc.spec)
				return
			}
			require.NoError(t, err)
			defer func() { require.NoError(t, s.Close()) }()
			require.IsType(t, tc.want, s)
			if tc.file != "" {
				_, err := os.Stat(tc.file)
				require.NoError(t, err)
			}
			rev, err := s.Commit(t.Context(), store.Txn{Ops: []store.Op{{Kind: store.OpPutPool, Pool: &store.Pool{ID: "p"}}}})
			require.NoError(t, err)
			require.Equal(t, int64(1), rev)
		})
	}
}

func TestRegisterTwicePanics(t *testing.T) {
	require.Panics(t, func() {
		store.Register("memory", func(string, bool, store.Config) (store.Store, error) { return nil, nil })
	})
}

package app

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/services/allocator/store"
	"github.com/plexusnet/plexus/services/allocator/store/bolt"
	"github.com/plexusnet/plexus/services/allocator/store/etcd"
)

// TestOpenStore: every spec --store takes opens its kind of store, and a
// spec that names none is refused with the spec quoted.
func TestOpenStore(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	tests := []struct {
		name    string
		spec    string
		want    any    // the type of store opened
		file    string // a file the store must create
		wantErr string
	}{
		{name: "default", spec: DefaultStore, want: &bolt.Store{}, file: "plexus-allocator.db"},
		{name: "bolt absolute path", spec: "bolt:" + filepath.Join(dir, "a.db"), want: &bolt.Store{}, file: filepath.Join(dir, "a.db")},
		{name: "bolt path with a colon", spec: "bolt:b:c.db", want: &bolt.Store{}, file: "b:c.db"},
		{name: "memory", spec: "memory", want: &bolt.Store{}},
		{name: "memory with argument", spec: "memory:x", wantErr: "takes no argument"},
		{name: "bolt without path", spec: "bolt", wantErr: "needs a file"},
		{name: "bolt with empty path", spec: "bolt:", wantErr: "needs a file"},
		{name: "bolt in missing directory", spec: "bolt:" + filepath.Join(dir, "no", "such", "x.db"), wantErr: "no such file or directory"},
		{name: "etcd without endpoints", spec: "etcd: , ", wantErr: "needs endpoints"},
		{name: "unknown", spec: "redis:x", wantErr: `unknown kind "redis" (known: bolt, etcd, memory)`},
		{name: "empty", spec: "", wantErr: "empty"},
		{name: "case matters", spec: "Bolt:x.db", wantErr: "unknown kind"},
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultOptions().Store
			o.Spec = tc.spec
			s, shared, err := OpenStore(o, quiet, StoreHooks{})
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				require.ErrorContains(t, err, tc.spec)
				return
			}
			require.NoError(t, err)
			defer func() { require.NoError(t, s.Close()) }()
			require.False(t, shared)
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

// TestStoreFlags: the flags reach the etcd store's configuration, and
// settings that cannot work are refused with the flag named.
func TestStoreFlags(t *testing.T) {
	parse := func(args ...string) (*StoreOptions, error) {
		o := DefaultOptions().Store
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		o.AddFlags(fs)
		require.NoError(t, fs.Parse(args))
		return &o, o.Validate()
	}
	o, err := parse("--etcd-prefix=/site/", "--etcd-watch-history=500")
	require.NoError(t, err)
	cfg, err := o.etcdConfig("http://127.0.0.1:2379, http://127.0.0.2:2379")
	require.NoError(t, err)
	require.Equal(t, etcd.Config{Endpoints: []string{"http://127.0.0.1:2379", "http://127.0.0.2:2379"}, Prefix: "/site/", History: 500}, cfg)
	for _, ok := range []string{"-1", "0", "10000000"} {
		_, err := parse("--etcd-watch-history=" + ok)
		require.NoError(t, err, ok)
	}
	for _, bad := range []struct{ arg, want string }{
		{"--etcd-watch-history=-2", "--etcd-watch-history"},
		{"--etcd-watch-history=10000001", "--etcd-watch-history"},
		{"--etcd-prefix=/", "--etcd-prefix"},
		{"--etcd-cert=c.pem", "--etcd-cert and --etcd-key"},
		{"--etcd-ca=/no/such/ca.pem", ""},
	} {
		o, err := parse(bad.arg)
		if bad.want == "" { // valid flags, a file that is not there
			require.NoError(t, err)
			_, err = o.etcdConfig("https://127.0.0.1:2379")
			require.ErrorContains(t, err, "--etcd-ca")
			continue
		}
		require.ErrorContains(t, err, bad.want, bad.arg)
	}
}

package etcd

import (
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
)

// TestFlags: the flags reach the store's configuration, and settings that
// cannot work are refused with the flag named.
func TestFlags(t *testing.T) {
	parse := func(args ...string) (*Flags, error) {
		var f Flags
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		f.AddFlags(fs)
		require.NoError(t, fs.Parse(args))
		return &f, f.Validate()
	}
	f, err := parse("--etcd-prefix=/site/", "--etcd-watch-history=500")
	require.NoError(t, err)
	cfg, err := f.Config("http://127.0.0.1:2379, http://127.0.0.2:2379")
	require.NoError(t, err)
	require.Equal(t, Config{Endpoints: []string{"http://127.0.0.1:2379", "http://127.0.0.2:2379"}, Prefix: "/site/", History: 500}, cfg)
	for _, ok := range []string{"-1", "0", "10000000"} {
		_, err := parse("--etcd-watch-history=" + ok)
		require.NoError(t, err, ok)
	}
	for _, bad := range []struct{ arg, want string }{
		{"--etcd-watch-history=-2", "--etcd-watch-history"},
		{"--etcd-watch-history=10000001", "--etcd-watch-history"},
		{"--etcd-prefix=/", "--etcd-prefix"},
		{"--etcd-cert=c.pem", "--etcd-cert and --etcd-key"},
	} {
		_, err := parse(bad.arg)
		require.ErrorContains(t, err, bad.want, bad.arg)
	}
	_, err = f.Config(" , ")
	require.ErrorContains(t, err, "needs endpoints")
}

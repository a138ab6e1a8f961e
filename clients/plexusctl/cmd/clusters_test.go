package cmd

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/internal/fleet"
)

// join and leave on a sources file: the address is checked when joined,
// the clusterset and the ranges are kept, and a file left without members
// says it means it.
func TestClustersJoinLeaveSourcesFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	for _, bad := range []string{"http://127.0.0.1:7402", "127.0.0.1:99999"} {
		_, err := runPlexusctl(t, "clusters", "join", "east", "--address", bad, "--sources-file", path)
		require.Error(t, err, bad)
		_, statErr := os.Stat(path)
		require.ErrorIs(t, statErr, os.ErrNotExist, "nothing written for %s", bad)
	}
	out, err := runPlexusctl(t, "clusters", "join", "east", "--address", "10.0.0.1:7402", "--clusterset", "prod", "--range", "10.1.0.0/16,fd00::/64", "--sources-file", path)
	require.NoError(t, err)
	require.Contains(t, out, "cluster east joined")
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	ms, err := fleet.ParseFile(data)
	require.NoError(t, err)
	require.Equal(t, []fleet.Member{{Name: "east", Addr: "10.0.0.1:7402", ClusterSet: "prod", Ranges: []string{"10.1.0.0/16", "fd00::/64"}}}, ms)

	_, err = runPlexusctl(t, "clusters", "leave", "east", "--sources-file", path)
	require.NoError(t, err)
	data, err = os.ReadFile(path)
	require.NoError(t, err)
	ms, err = fleet.ParseFile(data)
	require.NoError(t, err, "a file its last member left is explicitly empty")
	require.Empty(t, ms)
}

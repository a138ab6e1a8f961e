package app

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/internal/certgen"
	"github.com/plexusnet/plexus/internal/clusterid"
)

// TestClusterBoundFromCertificate: a repair learns from the certificate it
// presents whether it acts for its cluster only, and refuses one that
// names another cluster or clusterset.
func TestClusterBoundFromCertificate(t *testing.T) {
	dir := t.TempDir()
	_, err := certgen.Generate(certgen.Options{Dir: dir})
	require.NoError(t, err)
	_, err = certgen.GenerateMember(certgen.MemberOptions{Dir: dir, Clusterset: "east", Cluster: "a"})
	require.NoError(t, err)
	_, err = certgen.GenerateMember(certgen.MemberOptions{Dir: dir, Clusterset: "east", Fleet: true})
	require.NoError(t, err)
	a := clusterid.Identity{Cluster: "a", ClusterSet: "east"}

	bound, err := clusterBound(certgen.MemberFor(dir, "a", "repair").Cert, a)
	require.NoError(t, err)
	require.True(t, bound)
	for _, fleet := range []string{certgen.MemberFor(dir, "", "repair").Cert, certgen.For(dir, "repair").Cert} {
		bound, err = clusterBound(fleet, a)
		require.NoError(t, err)
		require.False(t, bound, fleet)
	}
	_, err = clusterBound(certgen.MemberFor(dir, "a", "repair").Cert, clusterid.Identity{Cluster: "b"})
	require.ErrorContains(t, err, `names cluster "a", but this repair serves cluster "b"`)
	_, err = clusterBound(certgen.MemberFor(dir, "a", "repair").Cert, clusterid.Identity{Cluster: "a", ClusterSet: "west"})
	require.ErrorContains(t, err, "clusterset")
	bound, err = clusterBound(certgen.MemberFor(dir, "a", "repair").Cert, clusterid.Identity{Cluster: "a"})
	require.NoError(t, err)
	require.True(t, bound, "no clusterset known: the cluster decides")

	junk := filepath.Join(dir, "junk.pem")
	require.NoError(t, os.WriteFile(junk, []byte("junk"), 0o600))
	_, err = clusterBound(junk, a)
	require.Error(t, err)
	_, err = clusterBound(filepath.Join(dir, "missing.pem"), a)
	require.Error(t, err)
}

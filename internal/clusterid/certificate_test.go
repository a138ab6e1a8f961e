package clusterid

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/internal/certgen"
)

// TestClusterBoundFromCertificate: a service learns from the certificate
// it presents whether it acts for its cluster only (repair then releases
// its cluster's allocations only), and refuses to start with one that
// names another cluster or clusterset.
func TestClusterBoundFromCertificate(t *testing.T) {
	dir := t.TempDir()
	_, err := certgen.Generate(certgen.Options{Dir: dir})
	require.NoError(t, err)
	_, err = certgen.GenerateMember(certgen.MemberOptions{Dir: dir, Clusterset: "east", Cluster: "a"})
	require.NoError(t, err)
	_, err = certgen.GenerateMember(certgen.MemberOptions{Dir: dir, Clusterset: "east", Fleet: true})
	require.NoError(t, err)
	a := Identity{Cluster: "a", ClusterSet: "east"}

	bound, err := CheckCertificate(certgen.MemberFor(dir, "a", "repair").Cert, a)
	require.NoError(t, err)
	require.True(t, bound)
	for _, fleet := range []string{certgen.MemberFor(dir, "", "repair").Cert, certgen.For(dir, "repair").Cert} {
		bound, err = CheckCertificate(fleet, a)
		require.NoError(t, err)
		require.False(t, bound, fleet)
	}
	_, err = CheckCertificate(certgen.MemberFor(dir, "a", "repair").Cert, Identity{Cluster: "b"})
	require.ErrorContains(t, err, `names cluster "a", but this service serves cluster "b"`)
	_, err = CheckCertificate(certgen.MemberFor(dir, "a", "repair").Cert, Identity{Cluster: "a", ClusterSet: "west"})
	require.ErrorContains(t, err, "clusterset")
	bound, err = CheckCertificate(certgen.MemberFor(dir, "a", "repair").Cert, Identity{Cluster: "a"})
	require.NoError(t, err)
	require.True(t, bound, "no clusterset known: the cluster decides")

	junk := filepath.Join(dir, "junk.pem")
	require.NoError(t, os.WriteFile(junk, []byte("junk"), 0o600))
	_, err = CheckCertificate(junk, a)
	require.Error(t, err)
	_, err = CheckCertificate(filepath.Join(dir, "missing.pem"), a)
	require.Error(t, err)
}

func TestNoCertificateNamesNothing(t *testing.T) {
	bound, err := CheckCertificate("", Identity{Cluster: "a"})
	require.NoError(t, err)
	require.False(t, bound)
}

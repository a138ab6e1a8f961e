package clusterid

import (
	"fmt"
	"os"

	"github.com/plexusnet/plexus/internal/auth"
)

// CheckCertificate reads the certificate a service presents (certFile,
// its --tls-cert) and reports whether it names a member cluster; one that
// does must name the cluster this service serves, and its clusterset when
// that is known, so that a certificate of one cluster deployed in another
// stops the service at start instead of being refused call by call. An
// empty certFile names nothing.
func CheckCertificate(certFile string, id Identity) (clusterBound bool, err error) {
	if certFile == "" {
		return false, nil
	}
	data, err := os.ReadFile(certFile)
	if err != nil {
		return false, fmt.Errorf("--tls-cert: %w", err)
	}
	cert, ok, err := auth.CertIdentity(data)
	switch {
	case err != nil:
		return false, fmt.Errorf("--tls-cert %s: %w", certFile, err)
	case !ok || cert.Cluster == "":
		return false, nil
	case cert.Cluster != id.Cluster:
		return false, fmt.Errorf("--tls-cert %s names cluster %q, but this service serves cluster %q", certFile, cert.Cluster, id.Cluster)
	case id.ClusterSet != "" && cert.Clusterset != id.ClusterSet:
		return false, fmt.Errorf("--tls-cert %s names clusterset %q, but this cluster belongs to %q", certFile, cert.Clusterset, id.ClusterSet)
	}
	return true, nil
}

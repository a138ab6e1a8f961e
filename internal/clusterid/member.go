package clusterid

import (
	"context"
	"log/slog"

	"github.com/plexusnet/plexus/internal/kubeclient"
)

// Member is the member cluster a service runs in: its Kubernetes clients,
// its identity, and whether the certificate the service presents names it.
type Member struct {
	Clients *kubeclient.Clients
	Identity
	// CertBound: the certificate names this cluster (a per-cluster
	// identity), so the allocator lets the service act on this cluster's
	// owners only.
	CertBound bool
}

// Join opens the member cluster the way membership, importer and repair
// do: the clients of opts, then the cluster's identity (flag is
// --cluster-name, checked against the ClusterProperty), then the check
// that certFile (--tls-cert; "" for none), when it names a member cluster,
// names this one, so that a certificate deployed in the wrong cluster
// stops the service at start.
func Join(ctx context.Context, opts kubeclient.Options, flag, certFile string, logger *slog.Logger) (Member, error) {
	clients, err := kubeclient.New(opts)
	if err != nil {
		return Member{}, err
	}
	id, err := Apply(ctx, clients.Dynamic, flag, logger)
	if err != nil {
		return Member{}, err
	}
	bound, err := CheckCertificate(certFile, id)
	if err != nil {
		return Member{}, err
	}
	return Member{Clients: clients, Identity: id, CertBound: bound}, nil
}

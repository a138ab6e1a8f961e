package sources

import (
	"crypto/x509"
	"fmt"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/plexusnet/plexus/internal/auth"
)

// Reasons a source is refused. They are stable: ListSources, the metric
// plexus_importer_source_refusals_total, the Events and the audit log
// carry them.
const (
	// RefusedIdentityCluster: the membership's certificate names another
	// member cluster.
	RefusedIdentityCluster = "IDENTITY_CLUSTER_MISMATCH"
	// RefusedIdentityClusterset: the certificate names another
	// clusterset than the importer's.
	RefusedIdentityClusterset = "IDENTITY_CLUSTERSET_MISMATCH"
	// RefusedIdentityService: the certificate names a cluster's service
	// other than its membership.
	RefusedIdentityService = "IDENTITY_SERVICE_MISMATCH"
	// RefusedIdentityRequired: cluster-bound identities are required and
	// the membership has none (a shared or fleet identity, a certificate
	// naming no Plexus identity, or no certificate at all).
	RefusedIdentityRequired = "CLUSTER_IDENTITY_REQUIRED"
	// RefusedServesOther: the membership says it serves another cluster.
	RefusedServesOther = "SERVES_OTHER_CLUSTER"
	// RefusedExportCluster: an export (or a withdrawal) names another
	// cluster as its own.
	RefusedExportCluster = "EXPORT_CLUSTER_MISMATCH"
)

// membershipService is the service part of a membership's identity.
const membershipService = "membership"

// Trust says which memberships may speak for a source cluster.
type Trust struct {
	// Clusterset, when known, is the clusterset a cluster-bound identity
	// must name.
	Clusterset string
	// RequireClusterIdentities refuses a membership whose certificate does
	// not name its cluster: a shared (legacy) or fleet identity, a
	// certificate naming no Plexus identity, no certificate at all.
	// Without it those are accepted, so that a fleet can move to
	// per-cluster identities one cluster at a time.
	RequireClusterIdentities bool
}

// A Refusal is why a source's membership was not listened to.
type Refusal struct {
	// Reason is one of the Refused* constants.
	Reason string
	// Identity is the principal of the membership's certificate; empty
	// without one.
	Identity string
	// Detail says what was wrong, for people.
	Detail string
}

// Error implements error.
func (r *Refusal) Error() string { return "source refused: " + r.Reason + ": " + r.Detail }

// Check decides whether the membership whose server certificate names
// principal (empty: none) may speak for cluster.
func (t Trust) Check(cluster, principal string) *Refusal {
	refuse := func(reason, format string, args ...any) *Refusal {
		return &Refusal{Reason: reason, Identity: principal, Detail: fmt.Sprintf(format, args...)}
	}
	id, ok := auth.ParseIdentity(principal)
	if !ok || id.Cluster == "" {
		// No certificate, a shared or a fleet identity, or one Plexus
		// does not know: nothing binds it to a cluster.
		if t.RequireClusterIdentities {
			if principal == "" {
				return refuse(RefusedIdentityRequired, "cluster identities are required and the membership presented no certificate")
			}
			return refuse(RefusedIdentityRequired, "cluster identities are required and the membership's certificate names %q, which is bound to no cluster", principal)
		}
		return nil
	}
	switch {
	case id.Service != membershipService:
		return refuse(RefusedIdentityService, "the membership's certificate names %q, the %s of cluster %s, not its membership", principal, id.Service, id.Cluster)
	case t.Clusterset != "" && id.Clusterset != t.Clusterset:
		return refuse(RefusedIdentityClusterset, "the membership's certificate names clusterset %s, not %s", id.Clusterset, t.Clusterset)
	case id.Cluster != cluster:
		return refuse(RefusedIdentityCluster, "the membership's certificate names cluster %s, not %s", id.Cluster, cluster)
	}
	return nil
}

// peerPrincipal names the holder of the certificate a stream's server
// presented; empty without TLS.
func peerPrincipal(p *peer.Peer) string {
	if p == nil {
		return ""
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return ""
	}
	var leaf *x509.Certificate
	if chains := info.State.VerifiedChains; len(chains) > 0 && len(chains[0]) > 0 {
		leaf = chains[0][0]
	} else if certs := info.State.PeerCertificates; len(certs) > 0 {
		leaf = certs[0]
	}
	if leaf == nil {
		return ""
	}
	return auth.CertPrincipal(leaf)
}

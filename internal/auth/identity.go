package auth

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// An Identity is what a principal says about its holder's place in a
// fleet. Plexus names its services by SPIFFE IDs of three shapes:
//
//	spiffe://TD/clusterset/CS/cluster/ID/SERVICE   a service of member cluster ID
//	spiffe://TD/clusterset/CS/fleet/SERVICE        a service with fleet rights
//	spiffe://TD/SERVICE                            a shared identity (legacy)
//
// A cluster-bound identity may act only for its own cluster (see the
// allocator's and the importer's checks); a fleet identity for any. The
// shared identities are those every cluster used before identities named
// their cluster: they keep fleet rights until a service is told to
// require cluster-bound ones, so a running fleet can move to per-cluster
// identities one cluster at a time (docs/security.md).
type Identity struct {
	// Principal is the principal the identity was read from.
	Principal string
	// TrustDomain is the SPIFFE ID's host; empty for a principal that is
	// not a SPIFFE ID (a certificate's common name, a token's name).
	TrustDomain string
	// Clusterset names the clusterset; empty for a shared identity.
	Clusterset string
	// Cluster is the member cluster's id; empty for a fleet or shared
	// identity.
	Cluster string
	// Service is the last part of the ID: membership, importer, repair,
	// allocator or operator.
	Service string
	// Shared is true for a spiffe://TD/SERVICE identity and for a
	// principal that is not a SPIFFE ID.
	Shared bool
}

// Fleet reports whether the identity may act for every cluster: a fleet
// identity, or a shared one.
func (id Identity) Fleet() bool { return id.Cluster == "" }

// ClusterPrincipal returns the SPIFFE ID of service in member cluster
// cluster of clusterset.
func ClusterPrincipal(trustDomain, clusterset, cluster, service string) string {
	return "spiffe://" + trustDomain + "/clusterset/" + clusterset + "/cluster/" + cluster + "/" + service
}

// FleetPrincipal returns the SPIFFE ID of service with fleet rights in
// clusterset.
func FleetPrincipal(trustDomain, clusterset, service string) string {
	return "spiffe://" + trustDomain + "/clusterset/" + clusterset + "/fleet/" + service
}

// ParseIdentity reads principal. A SPIFFE ID of none of the three shapes,
// or whose clusterset, cluster or service is not a DNS label, is an
// identity with no clusterset and no cluster that is not shared either:
// it names nobody Plexus knows, and has no rights beyond what a policy
// grants its principal by name. ok is false for it.
func ParseIdentity(principal string) (id Identity, ok bool) {
	id.Principal = principal
	rest, isSPIFFE := strings.CutPrefix(principal, "spiffe://")
	if !isSPIFFE {
		id.Service, id.Shared = principal, principal != ""
		return id, principal != ""
	}
	td, path, _ := strings.Cut(rest, "/")
	id.TrustDomain = td
	if td == "" {
		return id, false
	}
	parts := strings.Split(path, "/")
	for _, p := range parts {
		if !label(p) {
			return id, false
		}
	}
	switch {
	case len(parts) == 1:
		id.Service, id.Shared = parts[0], true
	case len(parts) == 5 && parts[0] == "clusterset" && parts[2] == "cluster":
		id.Clusterset, id.Cluster, id.Service = parts[1], parts[3], parts[4]
	case len(parts) == 4 && parts[0] == "clusterset" && parts[2] == "fleet":
		id.Clusterset, id.Service = parts[1], parts[3]
	default:
		return id, false
	}
	return id, true
}

func label(s string) bool { return len(validation.IsDNS1123Label(s)) == 0 }

// IdentityFrom returns the identity of the caller of the call ctx belongs
// to; ok is false for an anonymous caller and for a principal that names
// no identity Plexus knows.
func IdentityFrom(ctx context.Context) (Identity, bool) {
	p, ok := PrincipalFrom(ctx)
	if !ok {
		return Identity{}, false
	}
	return ParseIdentity(p)
}

// CertIdentity reads the identity a PEM certificate (its first
// CERTIFICATE block) names, as a server that verified it would: a
// service learns from its own certificate whether it acts for one member
// cluster or for the fleet. ok is as for ParseIdentity.
func CertIdentity(certPEM []byte) (id Identity, ok bool, err error) {
	for {
		var block *pem.Block
		block, certPEM = pem.Decode(certPEM)
		if block == nil {
			return Identity{}, false, errors.New("no PEM CERTIFICATE block")
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return Identity{}, false, fmt.Errorf("parse certificate: %w", err)
		}
		id, ok = ParseIdentity(CertPrincipal(cert))
		return id, ok, nil
	}
}

// Package policy carries the per-method authorization policies of the four
// services: <service>.json next to this file, in the gRPC authz JSON format
// that package auth reads (--authz-policy). The Kubernetes manifests in
// deploy/ carry the same documents in ConfigMaps, and docker-compose.yaml
// and `make demo SECURE=1` mount these files.
//
// Each policy allows, by the caller's SPIFFE ID, exactly the methods that
// caller's code uses, and the operator (plexusctl) everything. A service is
// named by its shared identity (spiffe://plexus.local/<name>, as `plexusctl
// certs` issues) and, by the suffix pattern "*/<name>", by the identities
// of member clusters and of the fleet (spiffe://plexus.local/clusterset/
// <clusterset>/cluster/<id>/<name>, .../fleet/<name>, as `plexusctl certs
// --clusterset` issues), so a fleet moves to them one cluster at a time; the
// operator's fleet identity is "*/fleet/operator". The policies grant
// methods only: which cluster's allocations a member's identity may touch
// is the allocator's rule (--clusterset, --require-cluster-identities).
//
//	allocator   membership: GetPool, Allocate, GetAllocation, Release (external workloads' addresses)
//	            importer:   BatchAllocate (clusterset VIPs)
//	            repair:     ListPools, ListAllocations, Release (leaks; always guarded by etag and owner uid)
//	membership  importer, repair: WatchServices
//	importer    operator only
//	repair      operator only
//
// grpc.health.v1 and server reflection are open in the shared runtime
// (package server): with mutual TLS, any holder of a certificate of the CA
// may call them. A test next to this file runs every policy in a real
// server and checks the table above against the services' source.
package policy

import (
	"embed"
	"fmt"
)

//go:embed *.json
var files embed.FS

// File returns the policy of service ("allocator").
func File(service string) ([]byte, error) {
	data, err := files.ReadFile(service + ".json")
	if err != nil {
		return nil, fmt.Errorf("policy of %s: %w", service, err)
	}
	return data, nil
}

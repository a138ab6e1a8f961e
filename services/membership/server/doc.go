// Package server is membership's gRPC edge: it validates requests, answers
// queries from the hub and the informer caches, hands registrations to the
// registry, streams WatchServices from the hub, and maps domain errors to
// statuses in one table.
//
// Bad input is refused before anything is written, with INVALID_ARGUMENT
// (reason INVALID_ARGUMENT) and a field violation per problem: resource
// names, Kubernetes label keys and values, addresses (parsed strictly by
// netparse, no loopback, link-local or unspecified addresses, one per
// family), ports, zones, node and host names, TTLs and pool names. An
// unknown pool is INVALID_ARGUMENT too, with reason POOL_NOT_FOUND on
// workload.address_pool.
package server

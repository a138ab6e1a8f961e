// Package ipam benchmarks the allocator's free-space index (Plexus's
// services/allocator/ipam) against the Kubernetes ClusterIP bitmap allocator
// (k8s.io/kubernetes/pkg/registry/core/service/ipallocator), side by side in
// one `go test -bench` run, at the same pool size and fill levels, with the
// same sequence of operations. The package has no code of its own outside
// its benchmarks.
package ipam

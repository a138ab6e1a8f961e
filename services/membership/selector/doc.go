// Package selector answers, for the membership service, which Services select
// a workload and which workloads a Service selects, without scanning either
// side.
//
// The Index is an inverted index over (namespace, key=value) label pairs.
// Every distinct pair is interned once per namespace and given a small integer
// id; Services and workloads refer to pairs by id, so 100,000 workloads cost a
// few hundred bytes each rather than a copy of their label maps.
//
// Service → workloads: each pair keeps the list of workloads that carry it,
// and Members walks the shortest list among the Service's selector pairs,
// keeping the workloads that carry the others too.
//
// Workload → services: each Service is filed under one of its selector pairs
// only, its anchor: the pair that the fewest Services select on, so that a
// Service selecting app=checkout,tier=frontend is filed under app=checkout
// rather than among the many tier=frontend ones. A lookup visits the anchor
// lists of the workload's pairs and checks the few candidates it finds
// against their whole selector, so its cost follows the number of candidate
// Services, not the size of the namespace.
//
// Affected applies the update rule of the Kubernetes EndpointSlice controller
// (and of Linkerd's ExternalWorkload controller) to one workload change: which
// Services must be reconciled again.
package selector

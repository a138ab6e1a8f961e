// Package kube is repair's Kubernetes adapter: what the repair pass knows
// of the owners of allocations, the member cluster's objects seen through
// client-go informers, and the services the source clusters export, as
// their membership streams tell (package sources, through [Exporter]).
// [View] implements decide.OwnerView over them, lists the EndpointSlices
// the importer manages, deletes an orphaned slice with preconditions, and
// names the Kubernetes object an Event about an owner belongs on.
//
// # Who is resolved
//
//   - Pods and ExternalWorkloads of --cluster-name, by namespace and name,
//     compared by uid; a Pod exists while its object does, whatever its
//     phase.
//   - ServiceImports of --cluster-name.
//   - ClusterSetService owners (no cluster, no uid): alive while at least
//     one source membership exports the service, or a ServiceImport of that
//     namespace and name exists in the member cluster.
//
// Owners of any other kind, or of another cluster, are not resolved
// ([View.Scopes] lists what is); the pass never judges them.
//
// # Claims
//
// An address is also claimed, outside the allocator, by a running Pod's
// IPs (not host-network Pods, whose IP is the node's, and not finished
// Pods, whose IP the network plugin has given back), a Service's
// clusterIPs, an ExternalWorkload's addresses and a ServiceImport's IPs. A
// ServiceImport's IPs and a derived Service's clusterIPs (a Service with
// the multicluster.plexus.dev/derived-from label) are claims of the
// ClusterSetService itself, so a clusterset VIP in use by its own import is
// not a duplicate.
//
// # When the view is incomplete
//
// [View.Synced] is false, with the reason, while an informer has not synced
// yet, while its last list or watch call failed (its cache may be stale:
// an owner created in the meantime would be missing), and while a source is
// unreachable or in the middle of a snapshot. The pass then acts on
// nothing. A source's stream is restarted with a fresh snapshot after every
// disconnect, so its view of what is exported is never a guess.
package kube

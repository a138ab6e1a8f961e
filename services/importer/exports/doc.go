// Package exports holds what the importer knows about the clusterset: for
// every exported service (namespace/name), the endpoint set each source
// cluster exports, and for every source cluster whether it is connected,
// when it was last heard from and whether it ever delivered a complete
// snapshot.
//
// Two feeds write into one Store: the WatchServices streams of the
// configured source clusters (origin "watch", package sources) and the
// push API (origin "push"). A snapshot replaces everything one cluster
// contributed, so a service missing from it is withdrawn; a source that
// goes down keeps its last known endpoints, marked stale by its
// SourceState.
//
// The Store calls a notify function with every change to a service's
// exports (which cluster, when it was observed, its trace context); the
// controller queues the service and the reconciler keeps what its next
// reconcile must account for. The Store itself keeps only the exports.
//
// Nothing in it talks to a server; endpoint sets are kept as received and
// never modified, so readers may share them.
package exports

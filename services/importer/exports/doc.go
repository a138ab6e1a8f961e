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
// The Store calls a notify function with the key of every service whose
// exports changed; the controller queues it. Besides the exports themselves
// it keeps, per service, what the next reconcile must account for: the
// oldest observation time of a change not yet written (per cluster), from
// which the export-to-import latency is measured, and the trace contexts of
// those changes, to which the reconcile span links.
//
// Nothing in it talks to a server; endpoint sets are kept as received and
// never modified, so readers may share them.
package exports

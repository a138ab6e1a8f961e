// Package controller materialises imported services in the member cluster:
// for every service some source cluster exports it writes a ServiceImport,
// a derived Service and EndpointSlices, and removes them when no cluster
// exports the service any more.
//
// It is the sample-controller loop around the pure cores: changes of the
// exports (package exports) and of the importer's own objects (package
// kube's informers) queue the service's key in a rate-limited workqueue;
// workers reconcile one key at a time (package reconcile, around the pure
// core of package materialize): merge the exports, allocate the clusterset
// VIPs, write the ServiceImport and the derived Service, plan and write
// each source cluster's slices, then write the ServiceImport's status from
// what was written. A failed reconcile is retried with exponential backoff
// (10 ms up to one minute).
//
// # Leadership
//
// Only a running Controller writes; Run is one leadership term. On other
// replicas the exports and caches stay warm and Status answers reads, so a
// new leader starts from a full picture.
//
// # What is written
//
//   - ServiceImport (namespace and name of the exported service, label
//     app.kubernetes.io/managed-by=importer.plexus.dev): spec.ips (the
//     clusterset VIPs), type, ports (union), session affinity; status:
//     clusters, endpointSliceObjects and the conditions Conflict (the MCS
//     rules: the oldest export wins, the losers are named), VIPAllocated,
//     EndpointsDropped and Ready (False with EndpointSlicesNotWritten while
//     a cluster's slices could not be written).
//   - derived Service (mcsnames.DerivedServiceName, labels managed-by and
//     multicluster.plexus.dev/derived-from, owned by the ServiceImport): no
//     selector, the union of ports, headless when the import is; otherwise
//     its cluster IPs are the VIPs, so kube-proxy programs the clusterset
//     address. When the API server refuses the VIPs (outside its service
//     ranges, or dual-stack VIPs in a single-stack cluster), the Service
//     gets addresses of its own and Ready says why.
//   - EndpointSlices, one set per source cluster, owned by the derived
//     Service, packed by package slices.
//
// A namespace that does not exist is reported (condition NamespaceMissing
// in the API, a Warning Event on the Namespace), never created; the service
// is imported when the namespace appears. A ServiceImport or Service of the
// same name without the importer's label is never touched.
//
// # VIPs
//
// With --vip-pool the VIPs of a ClusterSetIP import are allocated from the
// allocator in one BatchAllocate (one pool per family: a dual-stack import
// gets both addresses or neither), owned by {kind ClusterSetService,
// namespace, name, no cluster}, so every member cluster's importer gets the
// same addresses. An import waits (VIPAllocated=False, retried) until its
// VIPs are allocated; once the ServiceImport carries them an allocator
// outage does not hold back endpoint updates. The importer never releases a
// VIP. Without --vip-pool the import carries the derived Service's own
// cluster IPs.
//
// # Not acting on a stale cache
//
// Every write is recorded in a kube.Tracker; a reconcile whose service has
// a write the caches do not show yet is put off (the informer event that
// shows it queues the service again). Slices are named by the API server,
// so acting on a cache that misses a created slice would create it twice.
//
// # Orphaned slices and unreachable sources
//
// At the start of every term the controller lists its slices from the API
// (not the cache) and deletes those that no export asks for, and it deletes
// the slices of clusters that stopped exporting a service as part of the
// reconcile. Deleting is only right when what the importer knows of the
// slice's cluster is that cluster's last word. A cluster is authoritative:
//
//   - a configured source, once it delivered a complete snapshot in this
//     process (and from then on, also while it is unreachable: its last
//     known exports are kept and marked stale);
//   - any cluster (a source never reached since start-up, a cluster that
//     pushed its exports before a restart), once --source-grace has passed
//     since the term started.
//
// So an importer restarted while a source withdrew a service removes the
// orphaned slices as soon as that source's snapshot arrives, while one that
// cannot reach a source keeps that source's slices (and the ServiceImport
// and derived Service that own them) for the grace, since it has no last
// state of its own. Pushing clients re-push after a restart, or when the
// leader changes (pushes are kept only for the term that accepted them),
// within the grace. The sweep runs again whenever a cluster becomes authoritative.
//
// # Observability
//
// plexus_importer_export_import_duration_seconds measures, per source
// cluster, from the observation time of the oldest change not yet written
// (carried in the membership stream) to the last slice write for it; the
// reconcile span carries the same figure (plexus.export_import_latency_ms)
// and links to the trace contexts of the changes it handles, and the
// Kubernetes API calls made under it are its child spans.
// plexus_importer_writes_total counts writes by kind and operation,
// plexus_importer_queue_depth the services waiting,
// plexus_importer_reconciles_running those being reconciled and
// plexus_importer_reconcile_duration_seconds the reconciles by result.
// plexus_importer_caught_up_sources counts the sources whose complete state
// the term knew when it last swept and queued every service: once it equals
// the number of sources and nothing is queued or running, a restarted
// importer has caught up (and, when nothing changed while it was down, has
// written nothing).
package controller

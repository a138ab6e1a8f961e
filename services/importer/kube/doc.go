// Package kube is the importer's adapter to the member cluster's
// Kubernetes API: the informer caches it reads (Informers), the writes it
// makes (Writer) and the record of those writes that keeps it from acting on
// a cache older than its own last write (Tracker).
//
// It holds no decisions: what to write is decided by package reconcile
// with the pure core materialize (and slices and mcs under it). What it
// guarantees is that every write is attributable and guarded: deletes
// carry the uid and resourceVersion of the object that was judged, updates
// carry the resourceVersion that was read, and only objects carrying the
// importer's marks are ever selected
// (EndpointSlices by endpointslice.kubernetes.io/managed-by, ServiceImports
// and derived Services by app.kubernetes.io/managed-by).
package kube

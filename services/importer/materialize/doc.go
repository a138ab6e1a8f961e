// Package materialize holds the importer's decisions: what the member
// cluster's ServiceImport, derived Service and EndpointSlices of one
// clusterset service must be, which writes get them there, and what the
// import's status is. It is a pure core in the manner of the Kubernetes
// EndpointSlice reconciler and of repair's decide package: nothing in it
// talks to a server, so every rule is tested with tables, without a
// kube-apiserver.
//
// The runner (package reconcile, one service at a time for the loop of
// package controller) builds a View from the exports store and the member
// cluster's caches and calls, in order:
//
//   - Decide: merge the exports (package mcs) and say whether the service
//     is materialised, removed, or held back by a problem (a foreign
//     ServiceImport, a missing namespace, no valid export);
//   - ChooseVIPs: the clusterset VIPs the import carries, from the
//     allocator's answer or, without VIP pools, the derived Service's own
//     cluster IPs;
//   - Import and Derived: the ServiceImport and derived Service to write,
//     if anything differs from what the cluster holds (each is written at
//     most once per reconcile; the derived Service needs the
//     ServiceImport's uid as its owner, the slices the derived Service's);
//   - PlanSlices: one plan per source cluster (package slices), endpoints
//     the API server would refuse, and those with an address outside the
//     ranges their cluster declares (Export.Ranges, ErrOutOfRange),
//     dropped with their reason;
//   - Report: the one status value, from what was written (the Outcome
//     the runner records), never from what was planned. ImportStatus
//     renders it onto the ServiceImport; the gRPC API serves the same
//     value.
//
// Removal (Remove, for the Withdrawn verdict) is the other branch: the
// slices of clusters whose word is final, then the derived Service and the
// ServiceImport once nothing holds them back.
package materialize

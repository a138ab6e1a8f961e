// Package kube is membership's adapter to its cluster's Kubernetes API:
// the informer caches over Services, Pods, Nodes (for zones),
// ServiceExports and ExternalWorkloads, trimmed to what an endpoint needs
// and indexed (Pods by node, Pods and ExternalWorkloads by address); the
// conversions of those objects into the pure core's model (package
// endpoints) and of endpoint sets into the wire's; and membership's one
// write, a ServiceExport's status. It decides nothing: package controller
// does, with the core.
package kube

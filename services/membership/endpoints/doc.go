// Package endpoints computes the endpoint set of a Service from the workloads
// it selects, Pods and external workloads alike, the way the Kubernetes
// EndpointSlice controller does:
//
//   - a Pod in a terminal phase (Succeeded, Failed) is left out; one that is
//     being deleted stays in, marked terminating;
//   - serving follows the workload's Ready condition, terminating its deletion
//     timestamp, and ready is serving and not terminating, or always true when
//     the Service publishes not-ready addresses;
//   - a named target port is looked up per workload by name and protocol, and
//     a workload without it gets no port for that Service port; endpoints are
//     grouped by the set of ports they resolved to and by address family, as
//     the controller groups them into slices;
//   - a hostname is published only when the workload sets one and its
//     subdomain is the Service's name.
//
// The types are plain Go values; adapters fill them from Kubernetes objects
// and turn the result into protobuf messages.
package endpoints

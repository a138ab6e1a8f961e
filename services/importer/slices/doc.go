// Package slices decides how the endpoints one source cluster exports for one
// service are packed into EndpointSlices in the member cluster.
//
// It is a pure function of (desired endpoints, existing slices) → Plan
// (creates, updates, deletes), in the manner of the Kubernetes EndpointSlice
// reconciler: nothing in it talks to a server, so every rule can be tested and
// benchmarked on its own. It works on the k8s.io/api/discovery/v1 types so the
// Kubernetes adapter can hand a plan to client-go without translating it, and
// so endpoints (conditions, zone, hints, hostname, node, target reference)
// pass through without a field being lost on the way.
//
// # Rules
//
//   - A slice holds at most MaxEndpointsPerSlice endpoints of one address type
//     and one port set.
//   - An endpoint that is still desired stays in the slice that holds it
//     (but see compaction below); a changed endpoint rewrites only that
//     slice, so a change of one endpoint writes exactly one slice.
//   - A slice whose content is semantically unchanged (order of endpoints,
//     ports and hints ignored) is never written.
//   - New endpoints go, in this order, into: slices that are being written
//     anyway (the one with the most room first); slices that would otherwise
//     be deleted (a create plus a delete becomes one update); the fullest
//     unchanged slice that can take all of them; new slices, each filled up.
//   - When a plan creates no slice, a slice being written whose endpoints
//     all fit into the room of the other slices being written is emptied
//     into them and deleted.
//
// The order follows from counting API writes, now and later. Putting an
// endpoint into a slice that is already being rewritten, or into one that
// would otherwise be deleted, costs nothing extra. Any other slice costs one
// write, whether it is an existing slice or a new one, so the remaining
// endpoints go into one existing slice when one can take them all (which
// keeps the slice count down) and otherwise into new, full slices rather
// than being spread over several existing slices with one write each.
//
// Among slices written anyway the choice is free now but not later: room
// spread over them is room the next change is likely to find in a slice it
// writes anyway, so the most room goes first. Later random changes touch
// fewer slices when there are fewer of them, so the smallest slice being
// written anyway is emptied into the others being written when they have the
// room: its update becomes its delete. This is the one case where an unchanged
// endpoint moves; since deletes are applied after creates and updates, it is
// never missing in between.
//
// # Identity
//
// An endpoint is identified by its sorted addresses, its hostname and the
// kind, namespace and name of its target reference. A change to anything else
// (conditions, zone, node, hints, target uid) is an in-place update of the
// slice that holds the endpoint. A change of identity is a removal and an
// addition; because the slice it leaves is being written anyway, the new
// endpoint lands in that same slice.
//
// # Safety
//
// A slice whose managed-by label differs from the template's, or that
// carries another value for any of the template's labels (another service,
// another source cluster), is ignored completely: a slice of another
// controller or cluster is never modified or deleted even when the caller
// hands it in. A slice that lacks the template's owner
// references (for example one left by an earlier incarnation of the derived
// Service) is deleted and never reused. Updates keep the existing
// resourceVersion, so the API server refuses a write based on a stale read.
package slices

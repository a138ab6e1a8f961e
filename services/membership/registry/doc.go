// Package registry stores external workloads (VMs, bare-metal hosts) as
// ExternalWorkload objects in the Kubernetes API, allocates their addresses
// from the allocator, and turns them not-ready when their heartbeats stop.
//
// Membership replicas keep no state of their own: the object is the
// registration, so any replica can serve any call, and every write is
// guarded by the object's resourceVersion or uid.
//
// # Registration
//
// Register creates the object, or on AlreadyExists reads it and updates it
// in place, retrying on conflicts; concurrent registrations of one workload
// therefore end in one object. When the workload asks for an address from a
// pool, the allocation's owner is the object (kind ExternalWorkload, its
// namespace, name and uid), so it is allocated after the object exists.
// Allocate is idempotent per owner, so concurrent registrations get the
// same address; an allocation still held by an earlier object of the same
// name (whose release was lost) is released, guarded by its etag and that
// object's uid, and allocated again. The pool is checked before anything is
// written, so a registration naming an unknown pool writes nothing.
//
// # Readiness and heartbeats
//
// The Ready condition is what endpoints show. Register and Heartbeat set it
// to what the workload reports (reason Reported) and stamp the heartbeat
// time; the Sweeper sets it False with reason HeartbeatExpired once the
// heartbeat is older than the TTL. It expires only workloads that reported
// ready, so "True, or False because the heartbeat expired" is what the
// workload last reported, and a heartbeat that leaves readiness unset after
// an expiry restores it.
//
// # Deregistration
//
// Deregister deletes the object first (with a uid precondition) and then
// releases its address (guarded by the allocation's etag and the object's
// uid). In that order a failure leaves at worst a leaked address, which
// repair reclaims; the other order could leave a live endpoint on an
// address already handed to someone else.
package registry

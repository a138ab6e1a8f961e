// Package leader elects one active replica of a service (the importer, the
// repair) through a client-go Lease lock, with the same flags in every
// service that uses it.
//
// Leadership does not fence: a leader that pauses (a long GC, a stopped
// VM) may act for a moment after another replica has taken the lease over.
// Every write that matters is therefore guarded by a compare of its own
// (resourceVersion, uid precondition, allocation etag); election only
// keeps the replicas from doing the same work twice.
//
// Elector follows one replica's part: it runs the campaign (Run), knows
// whether this replica leads and in which term (Lead), which replica was
// last seen leading (Leader), exports a 0/1 gauge, and serves a readiness
// check. A term is a context that ends when leadership is lost; a service
// starts its term's work in the callback Run calls and marks the term
// accepted with Start once it is ready to act.
package leader

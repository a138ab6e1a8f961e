// Package pass runs repair passes: it lists every pool and allocation from
// the allocator (page by page), asks the owner view whether it is complete,
// hands everything to decide.Decide, and carries out what was decided —
// guarded releases and preconditioned slice deletions — then records the
// outcome as the latest report, in metrics, in Kubernetes Events and in a
// trace.
//
// # One pass at a time
//
// A Runner runs one pass at a time. A caller that asks for a pass while one
// is running waits for it to finish and then runs its own; if its context
// ends while it waits, Run fails with ErrPassInProgress. Waiting (rather
// than refusing at once) keeps an on-demand pass from failing only because
// the periodic one happened to be running.
//
// # What a pass acts on
//
// Only what decide.Decide planned, and only when the view was complete both
// before and after the allocations were listed: an informer that lost its
// watch during the listing makes the pass UNSYNCED. Releases carry the etag
// and the owner uid the pass saw; the allocator refuses them
// (FAILED_PRECONDITION ETAG_MISMATCH or OWNER_MISMATCH, NOT_FOUND
// ALLOCATION_NOT_FOUND or POOL_NOT_FOUND) when the allocation changed hands
// or is gone, and the finding then says RELEASE_REFUSED. Slices are deleted
// with uid and resourceVersion preconditions.
//
// # Events
//
// Events go on the Kubernetes object a finding is about where one exists:
// the recreated owner of an OWNER_MISMATCH, the owner and the other claimant
// of a DUPLICATE, the owner of an OUT_OF_RANGE allocation, the ServiceImport
// of a clusterset service, the orphaned slice. An owner that is gone has no
// object to carry an Event; its finding is in the report and the metrics.
// Dry runs and incomplete passes emit no Events: they change nothing, and an
// incomplete view may be wrong.
package pass

// Package decide is the pure core of the repair service: given one consistent
// look at the allocations, the pools, the owners that exist and the slices the
// importer manages, it decides what is wrong and what to do about it.
//
// Nothing in it talks to a server and nothing in it reads a clock: the time of
// the pass is an input, and what one pass must remember for the next (the
// leak strikes and when each finding was first seen) is returned in
// [Output.Strikes] and handed back in the next [Input]. The adapter lists the
// allocations, builds an [OwnerView] from its informers, calls [Decide],
// performs the guarded releases and slice deletions it was given, and records
// their outcome with [Output.ApplyReleaseResults].
//
// # Findings
//
//   - LEAK: the owner the allocation names no longer exists.
//   - OWNER_MISMATCH: an owner with the allocation owner's cluster, kind,
//     namespace and name exists, but with another uid: the owner was deleted
//     and recreated. The old allocation is a leak candidate and counts strikes
//     like a leak, unless the recreated owner is seen using the address (a
//     [Claim] with its uid), in which case it is only reported.
//   - DUPLICATE: the address is also claimed by a different owner, either
//     outside the allocator (a Service clusterIP, a Pod IP) or by an
//     allocation of the same address in another, overlapping pool.
//   - OUT_OF_RANGE: the address lies outside every CIDR of its pool (left by a
//     forced shrink).
//   - ORPHANED_SLICE: an EndpointSlice managed by the importer whose
//     ServiceImport and derived Service are both gone.
//   - STALLED_DELETION: a pool the allocator marks deleting (a forced
//     deletion in chunks) holds as many allocations as in the pass before:
//     the deletion was cut short (the replica doing it stopped, the store
//     failed), and nothing on the allocator's side goes on with it.
//
// # Rules
//
//   - A leak candidate (LEAK or OWNER_MISMATCH) is released only when it was
//     seen in Config.LeakStrikes consecutive passes AND the allocation is
//     older than Config.LeakGrace. Strikes are keyed by (pool, address, etag):
//     an address that was released and allocated again has a new etag and
//     starts from zero. A pass in which the candidate is not seen (the owner
//     is back, the allocation is gone) forgets it.
//   - Only owners the view can resolve are judged (Config.Resolvable lists the
//     (kind, cluster) pairs with a resolver); an allocation whose owner kind
//     has no resolver is never reported as a leak, only counted.
//   - A leak whose address is also out of range or claimed by another owner
//     is reported but not released: freeing it would let the allocator hand
//     out an address that is in use, or that the pool no longer covers.
//     OUT_OF_RANGE and DUPLICATE are never acted on automatically.
//   - A repair whose identity is bound to its member cluster
//     (Config.ClusterBound) releases that cluster's leaks only, as the
//     allocator lets it: a leaked clusterset VIP is reported, left to a
//     repair with fleet rights, and so is a stalled pool deletion.
//   - At most floor(Config.MaxReleaseFraction × allocations of the pool)
//     releases per pool and pass, but at least one when the fraction is not
//     zero, so a pool with fewer than ten allocations can still be cleaned at
//     10 %. Candidates over the limit are LIMITED and keep their strikes; the
//     limit is filled in address order.
//   - Every release carries the etag and the owner uid this pass saw. The
//     adapter must use the allocator's guarded release with both, so an
//     address that changed hands between the read and the release is not
//     freed; the outcome RELEASE_REFUSED says so and forgets the strikes.
//   - A dry-run pass reports what a real pass would do (DRY_RUN where a
//     release or deletion would happen) but returns the strikes it was given
//     unchanged, so dry runs can be asked for at any time without bringing a
//     release closer.
//   - A pass over an incomplete view (Input.Synced false: an informer not
//     synced, a source unreachable) reports its findings with action REPORTED,
//     plans no release and no deletion, leaves the strikes unchanged, and says
//     why in Output.Reason.
//   - An orphaned importer slice is deleted only when it was seen in
//     Config.LeakStrikes consecutive passes (strikes keyed by the slice's
//     uid) AND is older than Config.LeakGrace: informers of different types
//     are not in step, so a slice can be seen a moment before its
//     ServiceImport is, or a moment after the ServiceImport it belongs to
//     was created again.
//   - Allocations of a pool being deleted are counted (Stats.InDeletion),
//     not judged: they go with the pool, which hands nothing out.
//   - A stalled deletion is finished when it was seen stalled in
//     Config.LeakStrikes consecutive passes (the first pass to see a pool
//     being deleted cannot tell, so it counts none) AND the pool was marked
//     deleting longer ago than Config.LeakGrace. The adapter deletes the
//     pool with force, guarded by the pool's etag the pass saw; a pool
//     listed without one is only reported. A pool that shrank since the
//     pass before, or changed etag, starts from zero.
//
// # What the guard relies on
//
// The guarded release protects an address only if every change of hands gives
// the allocation a new etag. That includes an owner deleted and recreated
// under the same name: if the allocator answered the recreated owner's
// Allocate with the old record unchanged (same etag, old uid), a release
// planned for the old uid would still pass the guard and free an address the
// new owner uses. Claims of live owners (Pod IPs, workload addresses) narrow
// that window but cannot close it; the allocator must re-bind the record to
// the new uid with a new revision, or refuse.
//
// # Order
//
// Findings and releases are sorted by pool, then address, then kind, so two
// passes over the same input give the same output.
package decide

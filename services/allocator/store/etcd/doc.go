// Package etcd is the allocator's store for several replicas: the pools,
// allocations, owner index, quarantine and request records live in etcd
// (go.etcd.io/etcd/client/v3), and every replica that opens the same
// endpoints and prefix shares them. No leader is needed: conflicting
// writes lose an etcd transaction compare, and the loser decides again.
//
// # Key layout
//
// Every key starts with the installation's prefix (default "/plexus/"),
// so several installations can share one etcd. NUL separates the parts
// of a key (pool ids and owner keys never contain one), and addresses are
// written as the family digit and the address bytes in hex
// ("4" + "0a000001" for 10.0.0.1), so a range read returns records in
// the (pool, address) order of a store.Snapshot.
//
//	PREFIX rev/NN                                 commit marker (empty), put by every commit
//	PREFIX owners/POOL \0 OWNERKEY \0 ADDR        owner index entry (empty)
//	PREFIX pools-changed                           empty, put by every commit that puts or deletes a pool
//	PREFIX requests/ID                             request record, with a lease
//	PREFIX state/allocs/POOL \0 ADDR               allocation
//	PREFIX state/pools/POOL                        pool
//	PREFIX state/quarantine/POOL \0 ADDR           quarantine record
//	PREFIX state/tick                              written by a commit that puts nothing else under state/
//
// What the replicas follow lives under state/, and only that range is
// watched: every replica's watch carries one event per allocation, not one
// per key the allocation writes. The owner index and the request records
// are read by key or compared in transactions, never followed.
//
// Snapshots and pages of allocations are read at one revision, each read
// ending at a key near its last (window.go): etcd walks the whole range
// of a read in its index, under the lock its commits wait for, whatever
// the read's limit.
//
// A commit puts marker rev/00; a combined transaction (see Commits) puts
// one marker per commit, rev/NN for the NN-th, so only the commits that
// succeed put one. The latest mod revision of the markers is the latest
// commit, and the earliest create revision the first.
//
// Values are package record's compact binary encoding, the bolt file's:
// every replica decodes every allocation any replica commits, and this
// encoding is read with one allocation a value. etcdctl shows them as
// bytes; to read what a store holds, ask a running allocator (plexusctl
// pool list, plexusctl alloc list). Revisions are not stored: a record's
// revision (its etag) is its key's mod revision, and the store's revision
// is etcd's.
//
// # Commits
//
// A store.Txn is one etcd transaction. Conditions become compares: absent
// is CreateRevision == 0, a revision is ModRevision == rev, "owner
// absent" is CreateRevision == 0 over the owner's key range, "range free"
// the same over the allocation keys of the addresses (they sort as the
// addresses do), and "pools unchanged since rev" is ModRevision < rev+1
// of pools-changed, which every commit that puts or deletes a pool puts.
// The writes are those of the ops (no two name the same record, so no key
// is written twice, which etcd refuses), plus the commit marker, so every
// commit takes exactly one revision, and the tick when the commit puts
// nothing else under state/, so every commit shows up in a watch. Deleting a pool
// deletes its allocations, owner index entries and quarantine records as
// key ranges, allocations first, so their DeleteAllocation events come
// before the DeletePool event.
//
// Commits that need no read and put state (allocations guarded by
// "address absent", the hot path) are combined into one transaction with
// the others that arrive meanwhile, each nested with its own compares and
// marker (combine.go).
//
// Deleting or replacing an allocation also removes its owner index entry,
// whose key holds the owner. When the txn does not already say what the
// address holds (an allocation guarded by "address absent" needs no
// read), the store reads the allocations first and nests the transaction
// in one that checks their mod revisions are still those it read; a
// change in between is retried, a failed condition is store.ErrConflict.
//
// # Revisions and watches
//
// Revisions are etcd's, shared by every prefix of the cluster: commits of
// one installation get increasing revisions, consecutive when nothing
// else writes to the etcd. Watches read one etcd watch on the state range
// with previous values; events describe the change of each key of a
// commit, in the order of the txn's ops. A Store's watches share that etcd
// watch (feed.go): it is decoded once into a history kept in memory
// (Config.History events), which each watch reads at its own cursor, so a
// replica's follower and its WatchAllocations streams cost etcd one
// watcher. A watch from before that history (or from 0) gets an etcd
// watch of its own. A watch from a compacted revision fails with
// store.ErrCompacted at once; a watch that falls behind a later compaction
// ends with an error wrapping it, and one that falls half the history
// behind with store.ErrTooSlow (it resumes from its last revision).
//
// # Limits
//
// etcd bounds the operations of a transaction (--max-txn-ops, default
// 128), the compares and the writes separately: an allocation takes two
// compares and three writes, so a batch of more than about 40 addresses
// needs a higher limit. The request size limit (--max-request-bytes,
// default 1.5 MiB) comes at about 3,000 (some 500 bytes each). etcd's
// refusal of a commit for either is store.ErrTooLarge; the client itself
// sends up to 16 MiB, so etcd's flag is the limit. The combiner admits a
// commit only where the combined transaction stays within the limit, so a
// commit that etcd takes alone is never refused for what it was combined
// with (combine.go).
//
// Request records are kept for store.DefaultRequestRetention (a day), not
// for good: every request id would otherwise leave a key behind until
// etcd's space quota is full, and then every commit fails. A record is put
// with an etcd lease, shared by the records of a 24th of the period, which
// etcd revokes, deleting the record, when its TTL runs out (requests.go).
// Expiry deletes no key under state/, so watches see nothing of it.
package etcd

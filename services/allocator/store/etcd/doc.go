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
// of a key, and addresses are written as the family digit and the
// address bytes in hex ("4" + "0a000001" for 10.0.0.1), so a range read
// returns records in the (pool, address) order of a store.Snapshot.
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
// Only state/ is watched, so a watch carries one event per allocation; the
// owner index and request records are read by key or compared, never
// followed. Values are package record's encoding, the bolt file's (etcdctl
// shows bytes; plexusctl reads them). A record's revision is its key's mod
// revision, and the store's revision is etcd's; the latest mod revision of
// the markers is the latest commit, the earliest create revision the first.
//
// # Commits
//
// A store.Txn is one etcd transaction (commit.go): conditions become
// compares, ops become writes, plus the commit marker (and the tick when
// nothing else is put under state/), so every commit takes one revision and
// shows up in a watch. Allocations guarded by "address absent", the hot
// path, are combined with the commits that arrive meanwhile into one
// transaction (combine.go). A delete or replace whose owner the txn does not
// say is read first and guarded by its mod revision (plan.go).
//
// # Reads and watches
//
// Snapshots and pages are read at one revision in reads that end near
// their last key (window.go). A Store's watches share one etcd watch of
// state/, decoded once into a history in memory (feed.go); a watch from
// before that history gets an etcd watch of its own (watch.go).
//
// # Limits
//
// etcd's --max-txn-ops (default 128) bounds a transaction's compares and
// its writes: an allocation takes two compares and three writes, so a batch
// of more than about 40 addresses needs a higher limit. --max-request-bytes
// (default 1.5 MiB) comes at about 3,000 allocations. etcd's refusal for
// either is store.ErrTooLarge. Request records expire with etcd leases
// (requests.go).
package etcd

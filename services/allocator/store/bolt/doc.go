// Package bolt is the allocator's default store: one bbolt file on local
// disk.
//
// Every acknowledged Commit is on disk (fsync'd) before it returns, and
// concurrent commits share the fsync: one committer goroutine takes every
// transaction waiting (up to a cap), applies them in order in one bbolt
// write transaction and replies to each once it is committed; one whose
// conditions fail against the state the ones before it left gets
// store.ErrConflict and changes nothing (commit.go). Nothing waits to
// gather a batch, so the batch follows the load and a lone client pays for
// one commit.
//
// The file holds a bucket per kind of record (codec.go), values in package
// record's encoding. Allocations are filed under a sequence number, and
// the index by pool, address and owner is kept in memory, built in the
// background as the file opens (index.go; Ready). Events are kept in
// memory (package eventlog) from the revision the file had at Open; a
// watch from before gets store.ErrCompacted and re-lists. Request records
// expire (requests.go); Compact rewrites a file without its free pages
// while no allocator has it open.
package bolt

// Package bolt is the allocator's default store: one bbolt file on local
// disk.
//
// Every acknowledged Commit is on disk (fsync'd) before it returns, and
// concurrent commits share the fsync: one committer goroutine takes all
// the transactions waiting (up to a cap), evaluates and applies them in
// order in one bbolt read-write transaction, commits it, and only then
// replies to each. A transaction whose conditions fail against the state
// left by the ones before it in the batch gets store.ErrConflict and
// changes nothing; the others commit. Nothing waits to gather a batch:
// while one batch is being written the next one queues up, so the batch
// size follows the load and a lone client pays for one commit only.
//
// Events are kept in memory (package eventlog) from the revision the file
// had when it was opened; a watch from an older revision gets
// store.ErrCompacted and re-lists, as it would after an etcd compaction.
//
// The file holds one bucket per kind of record (see codec.go for the key
// layout). Allocations are filed under a sequence number; the index by
// pool and address and by owner (index.go) is kept in memory, built in
// the background as the file opens (Ready; commits wait for it). Values are package record's compact binary encoding:
// a million allocations are read back in well under a second. Compact
// rewrites a file without its free pages while no allocator has it open.
//
// Request records are kept for store.DefaultRequestRetention, as etcd's
// are, not for good: the file would otherwise grow with every request
// id. A sweeper goroutine deletes them once expired (requests.go).
// Sweeps are not commits: they take no revision and make no event.
package bolt

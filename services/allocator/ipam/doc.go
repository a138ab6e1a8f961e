// Package ipam is the allocator's pure core: the free-space index of one
// address pool. It has no gRPC, no store and no Kubernetes in it; the server
// keeps one Pool per pool, rebuilds it from the store at start-up (New, then
// Restore for every stored allocation), and consults it before writing an
// allocation to the store.
//
// # What a Pool holds
//
// A pool is one address family, several CIDRs that do not overlap, reserved
// ranges that are never handed out, and an optional reuse delay. The network
// and broadcast addresses of IPv4 CIDRs are never handed out either, except
// in a /31 or /32, which have none (RFC 3021); nor is the Subnet-Router
// anycast address of an IPv6 CIDR (its first, all-zeros interface id, RFC
// 4291 2.6.1), except in a /127 or /128 (RFC 6164).
//
// # Finding a free address without scanning
//
// Each CIDR has a 64-ary tree of bitmaps (see tree.go): leaves are blocks of
// 64 words of 64 bits, and every inner slot is either wholly used, wholly
// free, holds exactly one used address, or points to a child. Finding the
// next free address descends the tree, skipping full slots with one bit
// operation per level, so it costs the same in an empty pool and in a 99.99 %
// full one. It grows only with the height of the tree, which is the
// logarithm of the CIDR's size in base 64: three levels for an IPv4 /12,
// thirteen for an IPv6 /48.
//
// Space never touched costs nothing, and neither does space that is wholly
// used: memory follows the number of partly used blocks, so an IPv6 /64 pool
// costs memory in proportion to its allocations (little more than a block per
// 4096 addresses handed out in sequence; tens of bytes per address for
// addresses scattered at random), never to its size.
//
// AllocateNext is next-fit from a rotating cursor rather than lowest-first:
// a released address is handed out again only after every other free address
// has been. That spreads reuse over the pool, so a client that still holds a
// stale address is unlikely to collide with its new owner, and an IPv6 pool
// in practice never reuses an address. The reuse delay adds a hard floor on
// top: a released address is quarantined (kept used) until the delay has
// passed.
//
// # Time
//
// The core never reads the clock. Every operation that can free quarantined
// addresses takes the caller's now; a clock that steps backwards only delays
// the end of a quarantine, it never ends one early.
//
// # Concurrency
//
// A Pool is not safe for concurrent use. The allocator serialises operations
// per pool (they are short: see the benchmarks), so a lock here would only
// cost time.
package ipam

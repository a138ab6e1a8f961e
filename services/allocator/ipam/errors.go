package ipam

import (
	"errors"
	"fmt"
)

// Errors returned by Pool. They are returned wrapped with the address or CIDR
// concerned; test them with errors.Is.
var (
	// ErrNoCIDRs: a pool needs at least one CIDR.
	ErrNoCIDRs = errors.New("a pool needs at least one CIDR")
	// ErrInvalidCIDR: the CIDR is not valid or has host bits set.
	ErrInvalidCIDR = errors.New("invalid CIDR")
	// ErrInvalidAddress: the address is not valid or has a zone.
	ErrInvalidAddress = errors.New("invalid address")
	// ErrInvalidRange: a reserved range is not valid (ends missing, of
	// different families, or in the wrong order).
	ErrInvalidRange = errors.New("invalid range")
	// ErrInvalidReuseDelay: the reuse delay is negative.
	ErrInvalidReuseDelay = errors.New("reuse delay must not be negative")
	// ErrMixedFamily: an address, CIDR or range is not of the pool's family.
	ErrMixedFamily = errors.New("address family does not match the pool")
	// ErrOverlap: two CIDRs of one pool overlap.
	ErrOverlap = errors.New("CIDRs overlap")
	// ErrCIDRNotFound: RemoveCIDRs was given a CIDR the pool does not have.
	ErrCIDRNotFound = errors.New("CIDR not in pool")
	// ErrCIDRInUse: a CIDR to remove still holds allocations and force was
	// not given.
	ErrCIDRInUse = errors.New("CIDR still holds allocations")
	// ErrExhausted: no address is free.
	ErrExhausted = errors.New("pool exhausted")
	// ErrOutOfRange: the address is in none of the pool's CIDRs.
	ErrOutOfRange = errors.New("address not in pool")
	// ErrReserved: the address is reserved, or is the network or broadcast
	// address of an IPv4 CIDR, and is never handed out.
	ErrReserved = errors.New("address reserved")
	// ErrInUse: the address is allocated.
	ErrInUse = errors.New("address in use")
	// ErrInReuseDelay: the address was released and its reuse delay has
	// not passed. It wraps ErrInUse, so errors.Is(err, ErrInUse) holds for
	// it too; test ErrInReuseDelay first to tell the two apart.
	ErrInReuseDelay = fmt.Errorf("%w: released, reuse delay not yet passed", ErrInUse)
	// ErrNotAllocated: Release of an address that is not allocated
	// (including one already released and waiting out its reuse delay).
	ErrNotAllocated = errors.New("address not allocated")
)

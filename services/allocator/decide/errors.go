package decide

import (
	"errors"
	"fmt"
)

// Domain errors of the allocator. The gRPC server maps each of them
// to a status code and a stable reason, once, in one table.
var (
	ErrPoolNotFound = errors.New("pool not found")
	ErrPoolExists   = errors.New("pool already exists")
	ErrPoolOverlap  = errors.New("pool overlaps another pool")
	ErrPoolNotEmpty = errors.New("pool still holds allocations")
	// ErrPoolDeleting refuses to allocate in or update a pool whose
	// forced deletion is under way (store.Pool.Deleting).
	ErrPoolDeleting       = errors.New("pool is being deleted")
	ErrCIDRInUse          = errors.New("CIDR still holds allocations")
	ErrAllocationNotFound = errors.New("allocation not found")
	ErrEtagMismatch       = errors.New("etag does not match")
	ErrOwnerMismatch      = errors.New("owner uid does not match")
	ErrRevisionTooOld     = errors.New("revision too old, list again")
	ErrRevisionInFuture   = errors.New("revision after the store's current revision")
	// ErrWatchTooSlow ends a watch that read too slowly; it resumes from
	// the last revision it received.
	ErrWatchTooSlow    = errors.New("watch too slow; resume from the last resume_revision received")
	ErrRequestIDReused = errors.New("request_id was used for a different request")
	ErrFamilyMismatch  = errors.New("address family does not match the pool")
	ErrConflict        = errors.New("concurrent change, try again")
	// ErrStoreUnavailable and ErrBehind refuse a read that could not be
	// made as fresh as the store (see Allocator.Sync). ErrStoreUnavailable
	// also answers a commit the store could not confirm in time, which
	// may have been applied (store.ErrUnconfirmed).
	ErrStoreUnavailable = errors.New("store unavailable")
	ErrBehind           = errors.New("replica behind the store")
	// ErrClusterQuotaExceeded refuses an allocation for an owner whose
	// cluster holds the pool's cluster quota already.
	ErrClusterQuotaExceeded = errors.New("the owner's cluster holds its quota of the pool")
)

// FieldError is bad input in one request field. Reason is a stable
// UPPER_SNAKE code; when empty, the reason of the wrapped domain error
// applies.
type FieldError struct {
	Field   string
	Reason  string
	Message string
	// Err is the underlying domain error, if any, so callers can test it
	// with errors.Is.
	Err error
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("%s: %s", e.Field, e.Message)
}

// Unwrap returns the underlying domain error.
func (e *FieldError) Unwrap() error { return e.Err }

// Invalid returns the FieldError of bad input in field, with a stable
// reason and a message.
func Invalid(field, reason, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

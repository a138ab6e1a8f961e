package server

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"

	"github.com/plexusnet/plexus/internal/apierr"
	"github.com/plexusnet/plexus/services/allocator/decide"
	"github.com/plexusnet/plexus/services/allocator/ipam"
)

// errorTable maps the allocator's domain errors to gRPC codes and stable
// reasons. It is the only place where that happens.
var errorTable = apierr.Table{
	{Err: ipam.ErrExhausted, Code: codes.ResourceExhausted, Reason: "POOL_EXHAUSTED"},
	{Err: decide.ErrClusterQuotaExceeded, Code: codes.ResourceExhausted, Reason: "CLUSTER_QUOTA_EXCEEDED"},
	// ErrInReuseDelay wraps ErrInUse: it must come first.
	{Err: ipam.ErrInReuseDelay, Code: codes.FailedPrecondition, Reason: "ADDRESS_IN_REUSE_DELAY"},
	{Err: ipam.ErrInUse, Code: codes.AlreadyExists, Reason: "ADDRESS_IN_USE"},
	{Err: ipam.ErrOutOfRange, Code: codes.InvalidArgument, Reason: "ADDRESS_OUT_OF_RANGE"},
	{Err: ipam.ErrReserved, Code: codes.InvalidArgument, Reason: "ADDRESS_RESERVED"},
	{Err: decide.ErrFamilyMismatch, Code: codes.InvalidArgument, Reason: "ADDRESS_FAMILY_MISMATCH"},
	{Err: decide.ErrPoolNotFound, Code: codes.NotFound, Reason: "POOL_NOT_FOUND"},
	{Err: decide.ErrPoolExists, Code: codes.AlreadyExists, Reason: "POOL_ALREADY_EXISTS"},
	{Err: decide.ErrPoolOverlap, Code: codes.FailedPrecondition, Reason: "POOL_OVERLAP"},
	{Err: decide.ErrPoolNotEmpty, Code: codes.FailedPrecondition, Reason: "POOL_NOT_EMPTY"},
	{Err: decide.ErrPoolDeleting, Code: codes.FailedPrecondition, Reason: "POOL_DELETING"},
	{Err: decide.ErrCIDRInUse, Code: codes.FailedPrecondition, Reason: "CIDR_IN_USE"},
	{Err: decide.ErrAllocationNotFound, Code: codes.NotFound, Reason: "ALLOCATION_NOT_FOUND"},
	{Err: decide.ErrEtagMismatch, Code: codes.FailedPrecondition, Reason: "ETAG_MISMATCH"},
	{Err: decide.ErrOwnerMismatch, Code: codes.FailedPrecondition, Reason: "OWNER_MISMATCH"},
	{Err: decide.ErrRevisionTooOld, Code: codes.OutOfRange, Reason: "REVISION_TOO_OLD"},
	{Err: decide.ErrRevisionInFuture, Code: codes.OutOfRange, Reason: "REVISION_IN_FUTURE"},
	{Err: decide.ErrWatchTooSlow, Code: codes.ResourceExhausted, Reason: "WATCH_TOO_SLOW"},
	{Err: decide.ErrRequestIDReused, Code: codes.InvalidArgument, Reason: "REQUEST_ID_REUSED"},
	{Err: decide.ErrConflict, Code: codes.Aborted, Reason: "CONCURRENT_CHANGE"},
	{Err: decide.ErrStoreUnavailable, Code: codes.Unavailable, Reason: "STORE_UNAVAILABLE"},
	{Err: decide.ErrBehind, Code: codes.Unavailable, Reason: "REPLICA_BEHIND"},
	{Err: decide.ErrOwnerOutsideCluster, Code: codes.PermissionDenied, Reason: "OWNER_OUTSIDE_CLUSTER"},
	{Err: decide.ErrFleetRightsRequired, Code: codes.PermissionDenied, Reason: "FLEET_RIGHTS_REQUIRED"},
	{Err: decide.ErrClustersetMismatch, Code: codes.PermissionDenied, Reason: "CLUSTERSET_MISMATCH"},
	{Err: decide.ErrSharedIdentityRefused, Code: codes.PermissionDenied, Reason: "SHARED_IDENTITY_REFUSED"},
}

// NotLoaded is the answer to every call that arrives before the
// allocator has loaded its state from the store: UNAVAILABLE with the
// reason of a replica that cannot reach its store, so clients retry, on
// another replica if there is one.
func NotLoaded() error {
	return mapError(fmt.Errorf("the allocator has not loaded its store yet; retry later or on another replica: %w", decide.ErrStoreUnavailable))
}

// mapError turns a domain error into a status error. Bad input becomes
// INVALID_ARGUMENT with a BadRequest violation naming the field, and the
// field's own reason or, when it has none, the reason of the domain error
// it wraps; a domain error of another code wrapped in a field error keeps
// that code.
func mapError(err error) error {
	var fe *decide.FieldError
	if !errors.As(err, &fe) {
		return apierr.Map(err, errorTable)
	}
	reason := fe.Reason
	if fe.Err != nil {
		for _, r := range errorTable {
			if !errors.Is(fe.Err, r.Err) {
				continue
			}
			if r.Code != codes.InvalidArgument {
				return apierr.Map(err, errorTable)
			}
			if reason == "" {
				reason = r.Reason
			}
			break
		}
	}
	if reason == "" {
		reason = apierr.ReasonInvalidRequest
	}
	return apierr.InvalidField(reason, apierr.FieldViolation{Field: fe.Field, Description: fe.Message})
}

package server

import (
	"errors"

	"google.golang.org/grpc/codes"

	"github.com/plexusnet/plexus/internal/apierr"
	"github.com/plexusnet/plexus/services/membership/kube"
	"github.com/plexusnet/plexus/services/membership/registry"
	"github.com/plexusnet/plexus/services/membership/watch"
)

// Reasons of the membership API (see the service's proto documentation).
const (
	ReasonWorkloadNotFound     = "WORKLOAD_NOT_FOUND"
	ReasonServiceNotFound      = "SERVICE_NOT_FOUND"
	ReasonPoolNotFound         = "POOL_NOT_FOUND"
	ReasonAllocatorUnavailable = "ALLOCATOR_UNAVAILABLE"
	ReasonEtagMismatch         = "ETAG_MISMATCH"
	ReasonNotSynced            = "NOT_SYNCED"
	ReasonInvalidArgument      = "INVALID_ARGUMENT"
	ReasonWatchTooSlow         = "WATCH_TOO_SLOW"
	ReasonConcurrentChange     = "CONCURRENT_CHANGE"
	ReasonAddressInUse         = "ADDRESS_IN_USE"
	ReasonNamespaceNotFound    = "NAMESPACE_NOT_FOUND"
	ReasonAddressInPool        = "ADDRESS_IN_POOL"
)

var (
	errServiceNotFound = errors.New("service not found")
	errNotSynced       = errors.New("membership has not synced its caches yet; retry shortly")
)

// errorTable maps domain errors to gRPC codes and reasons; it is the only
// place where that happens.
var errorTable = apierr.Table{
	{Err: registry.ErrNotFound, Code: codes.NotFound, Reason: ReasonWorkloadNotFound},
	{Err: kube.ErrWorkloadNotFound, Code: codes.NotFound, Reason: ReasonWorkloadNotFound},
	{Err: errServiceNotFound, Code: codes.NotFound, Reason: ReasonServiceNotFound},
	{Err: registry.ErrAllocatorUnavailable, Code: codes.Unavailable, Reason: ReasonAllocatorUnavailable},
	{Err: registry.ErrEtagMismatch, Code: codes.FailedPrecondition, Reason: ReasonEtagMismatch},
	{Err: errNotSynced, Code: codes.Unavailable, Reason: ReasonNotSynced},
	{Err: registry.ErrInvalid, Code: codes.InvalidArgument, Reason: ReasonInvalidArgument},
	{Err: registry.ErrConflict, Code: codes.Aborted, Reason: ReasonConcurrentChange},
	{Err: registry.ErrAddressInUse, Code: codes.FailedPrecondition, Reason: ReasonAddressInUse},
	{Err: registry.ErrNamespaceNotFound, Code: codes.FailedPrecondition, Reason: ReasonNamespaceNotFound},
	{Err: registry.ErrAddressInPool, Code: codes.FailedPrecondition, Reason: ReasonAddressInPool},
	{Err: watch.ErrTooSlow, Code: codes.ResourceExhausted, Reason: ReasonWatchTooSlow},
}

// mapError turns an error of the registry, the controller or the hub into
// a status. Errors that blame one request field become INVALID_ARGUMENT
// with a field violation.
func mapError(err error) error {
	switch {
	case errors.Is(err, registry.ErrPoolNotFound):
		return apierr.InvalidField(ReasonPoolNotFound, apierr.FieldViolation{
			Field: "workload.address_pool", Description: err.Error(),
		})
	case errors.Is(err, registry.ErrInvalidPageToken):
		return apierr.InvalidField(ReasonInvalidArgument, apierr.FieldViolation{
			Field: "page_token", Description: err.Error(),
		})
	}
	return apierr.Map(err, errorTable)
}

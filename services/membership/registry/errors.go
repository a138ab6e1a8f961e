package registry

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/plexusnet/plexus/internal/apierr"
)

// Domain errors of the registry. The server maps them to gRPC statuses.
var (
	// ErrNotFound means the workload does not exist.
	ErrNotFound = errors.New("workload not found")
	// ErrPoolNotFound means the address pool a registration names does not
	// exist.
	ErrPoolNotFound = errors.New("address pool not found")
	// ErrAllocatorUnavailable means the allocator could not be reached.
	ErrAllocatorUnavailable = errors.New("allocator unavailable")
	// ErrEtagMismatch means the workload changed since the etag was read.
	ErrEtagMismatch = errors.New("etag mismatch")
	// ErrNamespaceNotFound means the workload's namespace does not exist.
	ErrNamespaceNotFound = errors.New("namespace not found")
	// ErrInvalid means the Kubernetes API refused the object.
	ErrInvalid = errors.New("invalid workload")
	// ErrConflict means concurrent changes kept a write from succeeding
	// within its retries.
	ErrConflict = errors.New("workload changed concurrently too often")
	// ErrAddressInUse means an address a registration brings is already
	// used by a Pod or another workload.
	ErrAddressInUse = errors.New("address already in use")
	// ErrAddressInPool means an address a registration brings lies in an
	// allocator pool without being allocated to the workload: the
	// allocator would hand it out again.
	ErrAddressInPool = errors.New("address lies in an allocator pool and is not allocated to this workload")
	// ErrInvalidPageToken means a List page token is malformed or expired.
	ErrInvalidPageToken = errors.New("invalid or expired page token")
)

// Reasons the allocator gives that the registry acts on.
const (
	reasonPoolNotFound       = "POOL_NOT_FOUND"
	reasonAllocationNotFound = "ALLOCATION_NOT_FOUND"
	reasonEtagMismatch       = "ETAG_MISMATCH"
	reasonOwnerMismatch      = "OWNER_MISMATCH"
)

// kubeError turns a Kubernetes API error into a domain error where one
// fits.
func kubeError(op string, err error) error {
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%s: %w", op, ErrNotFound)
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		return fmt.Errorf("%s: %w: %s", op, ErrInvalid, err)
	case apierrors.IsConflict(err):
		return fmt.Errorf("%s: %w", op, ErrConflict)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// allocatorError turns an allocator status into a domain error where one
// fits; other statuses (POOL_EXHAUSTED, ...) are passed on as they are.
func allocatorError(op string, err error) error {
	switch {
	case apierr.Reason(err) == reasonPoolNotFound:
		return fmt.Errorf("%s: %w", op, ErrPoolNotFound)
	case status.Code(err) == codes.Unavailable, status.Code(err) == codes.DeadlineExceeded:
		return fmt.Errorf("%s: %w: %s", op, ErrAllocatorUnavailable, status.Convert(err).Message())
	}
	if st, ok := status.FromError(err); ok {
		// The allocator's status, its reason and details, said once:
		// wrapping it would nest "rpc error: code = ... desc = ..." in
		// the message.
		p := st.Proto()
		p.Message = op + ": " + st.Message()
		return status.ErrorProto(p)
	}
	return fmt.Errorf("%s: %w", op, err)
}

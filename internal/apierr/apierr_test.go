package apierr_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plexusnet/plexus/internal/apierr"
)

var (
	errExhausted = errors.New("pool exhausted")
	errNotFound  = errors.New("not found")
)

type poolError struct {
	pool string
	err  error
}

func (e *poolError) Error() string { return "pool " + e.pool + ": " + e.err.Error() }
func (e *poolError) Unwrap() error { return e.err }

var table = apierr.Table{
	{Err: errExhausted, Code: codes.ResourceExhausted, Reason: "POOL_EXHAUSTED", Meta: func(err error) map[string]string {
		var pe *poolError
		if errors.As(err, &pe) {
			return map[string]string{"pool": pe.pool}
		}
		return nil
	}},
	{Err: errNotFound, Code: codes.NotFound, Reason: "ALLOCATION_NOT_FOUND"},
}

func TestNewCarriesErrorInfo(t *testing.T) {
	err := apierr.New(codes.FailedPrecondition, "ETAG_MISMATCH", "etag changed", map[string]string{"etag": "7"})

	st, ok := status.FromError(err)
	require.True(t, ok)
	require.Equal(t, codes.FailedPrecondition, st.Code())
	require.Equal(t, "etag changed", st.Message())
	require.Equal(t, "ETAG_MISMATCH", apierr.Reason(err))
	require.Equal(t, map[string]string{"etag": "7"}, apierr.Metadata(err))
	require.Equal(t, apierr.Domain, apierr.Info(err).GetDomain())

	// A status travels as its proto; the detail must survive that.
	back := status.FromProto(st.Proto()).Err()
	require.Equal(t, "ETAG_MISMATCH", apierr.Reason(back))
}

func TestReasonOfForeignErrors(t *testing.T) {
	require.Empty(t, apierr.Reason(nil))
	require.Empty(t, apierr.Reason(errors.New("plain")))
	require.Empty(t, apierr.Reason(status.Error(codes.Unavailable, "no details")))
}

func TestInvalidArgument(t *testing.T) {
	err := apierr.InvalidArgument(
		apierr.FieldViolation{Field: "pool.cidrs[0]", Description: "host bits set"},
		apierr.FieldViolation{Field: "owner.uid", Description: "required"},
	)
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	require.Equal(t, apierr.ReasonInvalidRequest, apierr.Reason(err))
	require.Equal(t, []apierr.FieldViolation{
		{Field: "pool.cidrs[0]", Description: "host bits set"},
		{Field: "owner.uid", Description: "required"},
	}, apierr.FieldViolations(err))
	require.Contains(t, status.Convert(err).Message(), "owner.uid: required")
}

func TestInvalidFieldKeepsItsReason(t *testing.T) {
	err := apierr.InvalidField("INVALID_CIDR", apierr.FieldViolation{Field: "pool.cidrs[1]", Description: "host bits set"})
	require.Equal(t, codes.InvalidArgument, status.Code(err))
	require.Equal(t, "INVALID_CIDR", apierr.Reason(err))
	require.Equal(t, []apierr.FieldViolation{{Field: "pool.cidrs[1]", Description: "host bits set"}}, apierr.FieldViolations(err))
}

func TestStatusRejectsMalformedReason(t *testing.T) {
	require.Panics(t, func() { apierr.New(codes.Internal, "poolExhausted", "x", nil) })
}

func TestValidReason(t *testing.T) {
	for reason, want := range map[string]bool{
		"POOL_EXHAUSTED":        true,
		"A1":                    true,
		"A":                     false,
		"_LEADING":              false,
		"TRAILING_":             false,
		"lower":                 false,
		"HAS-DASH":              false,
		"":                      false,
		strings.Repeat("A", 63): true,
		strings.Repeat("A", 64): false,
	} {
		require.Equal(t, want, apierr.ValidReason(reason), reason)
	}
}

func TestMap(t *testing.T) {
	existing := apierr.New(codes.Aborted, "CONFLICT", "already", nil)
	tests := []struct {
		name     string
		err      error
		code     codes.Code
		reason   string
		meta     map[string]string
		sameErr  bool
		contains string
	}{
		{name: "nil", err: nil, code: codes.OK},
		{name: "sentinel", err: errNotFound, code: codes.NotFound, reason: "ALLOCATION_NOT_FOUND"},
		{name: "wrapped sentinel keeps context", err: fmt.Errorf("release 10.0.0.1: %w", errNotFound),
			code: codes.NotFound, reason: "ALLOCATION_NOT_FOUND", contains: "release 10.0.0.1"},
		{name: "metadata from typed error", err: fmt.Errorf("allocate: %w", &poolError{pool: "blue", err: errExhausted}),
			code: codes.ResourceExhausted, reason: "POOL_EXHAUSTED", meta: map[string]string{"pool": "blue"}},
		{name: "status passes through", err: existing, code: codes.Aborted, reason: "CONFLICT", sameErr: true},
		{name: "wrapped status passes through", err: fmt.Errorf("call allocator: %w", existing), code: codes.Aborted, reason: "CONFLICT", sameErr: true},
		{name: "canceled", err: fmt.Errorf("list: %w", context.Canceled), code: codes.Canceled, reason: apierr.ReasonCanceled},
		{name: "deadline", err: context.DeadlineExceeded, code: codes.DeadlineExceeded, reason: apierr.ReasonDeadlineExceeded},
		{name: "violations", err: fmt.Errorf("parse: %w", apierr.Violations{{Field: "cidr", Description: "bad"}}),
			code: codes.InvalidArgument, reason: apierr.ReasonInvalidRequest},
		{name: "unknown", err: errors.New("disk on fire"), code: codes.Internal, reason: apierr.ReasonInternal, contains: "disk on fire"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := apierr.Map(tc.err, table)
			require.Equal(t, tc.code, status.Code(got))
			require.Equal(t, tc.reason, apierr.Reason(got))
			if tc.meta != nil {
				require.Equal(t, tc.meta, apierr.Metadata(got))
			}
			if tc.sameErr {
				require.Same(t, tc.err, got)
			}
			if tc.contains != "" {
				require.Contains(t, status.Convert(got).Message(), tc.contains)
			}
		})
	}
}

func TestTableCheck(t *testing.T) {
	require.NoError(t, table.Check())
	require.ErrorContains(t, apierr.Table{{Err: errNotFound, Code: codes.NotFound, Reason: "notFound"}}.Check(), "UPPER_SNAKE")
	require.ErrorContains(t, apierr.Table{{Code: codes.NotFound, Reason: "NOT_FOUND"}}.Check(), "no error")
	require.ErrorContains(t, apierr.Table{{Err: errNotFound, Reason: "NOT_FOUND"}}.Check(), "code OK")
}

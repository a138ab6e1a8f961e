package apierr

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Domain is the ErrorInfo domain of every error a Plexus service returns.
const Domain = "plexus.dev"

// Reasons used by the shared runtime itself. Services define their own next
// to their error tables.
const (
	// ReasonInvalidRequest marks a request rejected by validation; the
	// BadRequest detail lists the fields.
	ReasonInvalidRequest = "INVALID_REQUEST"
	// ReasonInternal marks an error the service did not expect.
	ReasonInternal = "INTERNAL"
	// ReasonCanceled marks a call whose context was canceled.
	ReasonCanceled = "CANCELED"
	// ReasonDeadlineExceeded marks a call whose deadline passed.
	ReasonDeadlineExceeded = "DEADLINE_EXCEEDED"
)

// reasonPattern is AIP-193's rule for ErrorInfo.reason.
var reasonPattern = regexp.MustCompile(`^[A-Z][A-Z0-9_]{0,61}[A-Z0-9]$`)

// ValidReason reports whether reason is UPPER_SNAKE_CASE of at most 63
// characters, as AIP-193 requires.
func ValidReason(reason string) bool {
	return reasonPattern.MatchString(reason)
}

// Status builds a status with an ErrorInfo detail. It panics on a malformed
// reason: reasons are constants, so that is a programming error that the
// first test exercising the path reveals.
func Status(code codes.Code, reason, msg string, meta map[string]string) *status.Status {
	if !ValidReason(reason) {
		panic(fmt.Sprintf("apierr: reason %q is not UPPER_SNAKE_CASE", reason))
	}
	st := status.New(code, msg)
	withInfo, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: Domain, Metadata: meta})
	if err != nil {
		// WithDetails fails only for codes.OK or an unmarshalable detail;
		// neither can happen for a well-formed ErrorInfo on an error code.
		return st
	}
	return withInfo
}

// New returns an error status with code, message and an ErrorInfo carrying
// reason and meta (meta may be nil).
func New(code codes.Code, reason, msg string, meta map[string]string) error {
	return Status(code, reason, msg, meta).Err()
}

// FieldViolation names one invalid field of a request.
type FieldViolation struct {
	// Field is the path to the field, in proto field names joined with dots
	// (for example "pool.cidrs[2]").
	Field string
	// Description says what is wrong, for a human.
	Description string
}

// Violations is an error listing invalid fields. A request's Validate method
// may return it; the server runtime turns it into INVALID_ARGUMENT with a
// BadRequest detail.
type Violations []FieldViolation

// Error implements error.
func (v Violations) Error() string {
	parts := make([]string, 0, len(v))
	for _, fv := range v {
		parts = append(parts, fv.Field+": "+fv.Description)
	}
	return "invalid request: " + strings.Join(parts, "; ")
}

// InvalidArgument returns INVALID_ARGUMENT with reason INVALID_REQUEST and a
// BadRequest detail listing violations.
func InvalidArgument(violations ...FieldViolation) error {
	return InvalidField(ReasonInvalidRequest, violations...)
}

// Info returns the Plexus ErrorInfo of err, or nil when err is not a status
// or carries none of domain plexus.dev.
func Info(err error) *errdetails.ErrorInfo {
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == Domain {
			return info
		}
	}
	return nil
}

// Reason returns the ErrorInfo reason of err, or "" when it has none.
// Clients use it to branch on errors.
func Reason(err error) string {
	return Info(err).GetReason()
}

// Metadata returns the ErrorInfo metadata of err (nil when it has none).
func Metadata(err error) map[string]string {
	return Info(err).GetMetadata()
}

// FieldViolations returns the BadRequest field violations of err.
func FieldViolations(err error) []FieldViolation {
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	var out []FieldViolation
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, fv := range br.GetFieldViolations() {
				out = append(out, FieldViolation{Field: fv.GetField(), Description: fv.GetDescription()})
			}
		}
	}
	return out
}

// Rule maps one domain error to a status code and reason.
type Rule struct {
	// Err is matched with errors.Is.
	Err error
	// Code is the gRPC code the error becomes.
	Code codes.Code
	// Reason is the ErrorInfo reason, UPPER_SNAKE_CASE.
	Reason string
	// Meta, when set, extracts ErrorInfo metadata from the matched error
	// (for example the pool name from a typed error that wraps Err).
	Meta func(err error) map[string]string
}

// Table is the list of rules a service maps its domain errors with; the first
// matching rule wins.
type Table []Rule

// Check reports a rule with a malformed reason or a missing error, so a
// service can assert its table once in a test instead of finding out when
// the error first occurs.
func (t Table) Check() error {
	for i, r := range t {
		if r.Err == nil {
			return fmt.Errorf("rule %d (%s): no error to match", i, r.Reason)
		}
		if !ValidReason(r.Reason) {
			return fmt.Errorf("rule %d: reason %q is not UPPER_SNAKE_CASE", i, r.Reason)
		}
		if r.Code == codes.OK {
			return fmt.Errorf("rule %d (%s): code OK is not an error", i, r.Reason)
		}
	}
	return nil
}

// Map translates err into a status error:
//   - nil stays nil;
//   - an error that already is a status (built by New, or returned by a
//     gRPC client call) is passed through unchanged;
//   - the first rule of table whose Err matches (errors.Is) decides code and
//     reason; the message is err's text, which carries the wrapped context;
//   - context cancellation and deadline become CANCELED / DEADLINE_EXCEEDED;
//   - anything else becomes INTERNAL with reason INTERNAL.
func Map(err error, table Table) error {
	if err == nil {
		return nil
	}
	var st interface{ GRPCStatus() *status.Status }
	if errors.As(err, &st) {
		return err
	}
	for _, r := range table {
		if errors.Is(err, r.Err) {
			var meta map[string]string
			if r.Meta != nil {
				meta = r.Meta(err)
			}
			return New(r.Code, r.Reason, err.Error(), meta)
		}
	}
	var violations Violations
	if errors.As(err, &violations) {
		return InvalidArgument(violations...)
	}
	switch {
	case errors.Is(err, context.Canceled):
		return New(codes.Canceled, ReasonCanceled, err.Error(), nil)
	case errors.Is(err, context.DeadlineExceeded):
		return New(codes.DeadlineExceeded, ReasonDeadlineExceeded, err.Error(), nil)
	}
	return New(codes.Internal, ReasonInternal, err.Error(), nil)
}

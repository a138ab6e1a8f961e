package apierr

import (
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
)

// InvalidField returns INVALID_ARGUMENT with a specific reason (for example
// INVALID_CIDR) and a BadRequest detail naming the fields, for bad input
// whose reason a caller can act on.
func InvalidField(reason string, violations ...FieldViolation) error {
	st := Status(codes.InvalidArgument, reason, Violations(violations).Error(), nil)
	br := &errdetails.BadRequest{}
	for _, v := range violations {
		br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{
			Field:       v.Field,
			Description: v.Description,
		})
	}
	withBR, err := st.WithDetails(br)
	if err != nil {
		return st.Err()
	}
	return withBR.Err()
}

package netparse

import "fmt"

// Reason is a stable, machine-readable UPPER_SNAKE code for why a value was
// refused. Reasons are part of the API: clients may switch on them, so they
// are never renamed.
type Reason string

// The reasons a value can be refused.
const (
	// ReasonInvalidAddress: not an IP address (includes empty text,
	// whitespace and IPv4 octets with leading zeros).
	ReasonInvalidAddress Reason = "INVALID_ADDRESS"
	// ReasonInvalidCIDR: not a CIDR (includes a missing or malformed
	// prefix length).
	ReasonInvalidCIDR Reason = "INVALID_CIDR"
	// ReasonHostBitsSet: a CIDR whose address has bits set past the prefix
	// length; the description names the canonical CIDR.
	ReasonHostBitsSet Reason = "HOST_BITS_SET"
	// ReasonZoneNotAllowed: an IPv6 address with a zone ("%eth0").
	ReasonZoneNotAllowed Reason = "ZONE_NOT_ALLOWED"
	// ReasonMappedNotAllowed: an IPv4-mapped IPv6 address ("::ffff:1.2.3.4")
	// without AllowMapped.
	ReasonMappedNotAllowed Reason = "MAPPED_NOT_ALLOWED"
	// ReasonInvalidRange: a range that is malformed, runs backwards or
	// mixes address families.
	ReasonInvalidRange Reason = "INVALID_RANGE"
)

// maxValueLen bounds how much of the refused text an error carries, so that a
// huge request field cannot make an equally huge error reply or log line.
const maxValueLen = 128

// Error reports a value that was refused. It carries no field name because the
// parser does not know which field the text came from; see Field.
type Error struct {
	// Value is the refused text, cut to 128 bytes (with "..." appended) when
	// longer.
	Value string
	// Reason is the stable code of the refusal.
	Reason Reason
	// Description says in words what is wrong, for people.
	Description string
}

func newError(value string, reason Reason, format string, args ...any) *Error {
	if len(value) > maxValueLen {
		value = value[:maxValueLen] + "..."
	}
	return &Error{Value: value, Reason: reason, Description: fmt.Sprintf(format, args...)}
}

// Error implements error.
func (e *Error) Error() string {
	return fmt.Sprintf("%q: %s", e.Value, e.Description)
}

// Field attaches the name of the request field that held the value (for
// example "pool.cidrs[2]"), which is what a BadRequest field violation needs.
func (e *Error) Field(name string) *FieldError {
	return &FieldError{Field: name, Err: e}
}

// FieldError is an *Error tied to the request field that held the value. The
// gRPC edge finds it with errors.As and turns it into a field violation whose
// field is Field, whose reason is Err.Reason and whose description is
// Err.Description.
type FieldError struct {
	// Field is the request field path, as the caller named it.
	Field string
	// Err is the parse error.
	Err *Error
}

// Error implements error.
func (e *FieldError) Error() string {
	return fmt.Sprintf("%s: %v", e.Field, e.Err)
}

// Unwrap lets errors.As reach the *Error.
func (e *FieldError) Unwrap() error {
	return e.Err
}

// Package netparse is the one strict gate for every IP address, CIDR and
// address range that enters Plexus from a user, a flag or a request.
//
// It is stricter than net/netip on purpose: text that a person could read
// two ways, or that quietly means something other than it seems, is refused
// instead of being normalised behind the caller's back.
//
//   - IPv4 octets with leading zeros ("010.0.0.1") are refused: some tools
//     read them as octal.
//   - IPv6 zones ("fe80::1%eth0") are refused: a zone names an interface of
//     one host and means nothing to an allocator shared by a fleet.
//   - A CIDR with host bits set ("10.0.0.1/24") is refused, and the error
//     names the CIDR that was probably meant ("10.0.0.0/24").
//   - IPv4-mapped IPv6 addresses ("::ffff:1.2.3.4") are refused unless the
//     caller passes AllowMapped: they look like IPv4 but compare as IPv6.
//   - Empty strings and leading, trailing or embedded whitespace are refused.
//   - Ranges whose first address is above the last, or whose ends are of
//     different families, are refused.
//
// Everything that parses formats back (String) to a canonical text that
// parses to the same value again.
//
// Errors are *Error values with a stable UPPER_SNAKE Reason, so that a gRPC
// server can turn them into google.rpc.BadRequest field violations without
// matching on message text. The package itself knows nothing of gRPC: the
// caller, who knows which request field held the text, attaches the field
// name with (*Error).Field, and the server edge finds the *FieldError (or the
// bare *Error) with errors.As.
package netparse

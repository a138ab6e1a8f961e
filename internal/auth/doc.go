// Package auth identifies the caller of a gRPC method and decides whether it
// may call it.
//
// # Principals
//
// Every authenticated caller has one principal, a string:
//
//   - a bearer token ("authorization: Bearer <token>" metadata) stands for
//     the principal the tokens file gives it. The file has one
//     "token,principal" pair per line; blank lines and lines starting with #
//     are ignored. A token the file does not know is rejected with
//     UNAUTHENTICATED (reason INVALID_TOKEN).
//   - a client certificate verified by mutual TLS stands for its first
//     spiffe:// URI SAN when it has one (spiffe://plexus.dev/repair), and for
//     its subject common name otherwise (repair).
//
// A valid token wins over the certificate, so a trusted proxy holding a
// certificate can act for the token's owner. A caller with neither is
// anonymous (empty principal).
//
// # Policy
//
// The policy file uses the JSON format of gRPC's authz package
// (google.golang.org/grpc/authz):
//
//	{
//	  "name": "allocator",
//	  "deny_rules": [
//	    {"name": "only-repair-releases-guarded",
//	     "source": {"principals": ["membership", "importer"]},
//	     "request": {"paths": ["/plexus.allocator.v1.AllocatorService/Release"]}}
//	  ],
//	  "allow_rules": [
//	    {"name": "services", "source": {"principals": ["membership", "importer", "repair", "spiffe://plexus.dev/*"]}},
//	    {"name": "read-only-for-all", "request": {"paths": ["/plexus.allocator.v1.AllocatorService/Get*", "/plexus.allocator.v1.AllocatorService/List*"]}}
//	  ]
//	}
//
// A call is denied when any deny rule matches, else allowed when any allow
// rule matches, else denied. A rule matches when its source and its request
// match; an absent part matches everything. "principals", "paths" and header
// "values" match exactly, or by prefix ("abc*"), suffix ("*abc"), or any
// non-empty value ("*"). Principals are this package's principals (above),
// not gRPC's certificate fields; so "*" means "any authenticated caller",
// and a rule without principals also matches anonymous callers. Header keys
// are lower case; every listed header must match one of its values.
//
// A denied anonymous caller gets UNAUTHENTICATED (reason
// AUTHENTICATION_REQUIRED), a denied known caller PERMISSION_DENIED (reason
// ACCESS_DENIED).
package auth

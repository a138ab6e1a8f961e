package reasondoc_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/internal/apierr/reasondoc"
)

// root is the repository's top, from this package's directory.
const root = "../../.."

// runtime is the shared code every service's calls pass through: its
// reasons (limits, authentication, undecodable requests) can end any call.
var runtime = []string{"internal/server", "internal/auth", "internal/apierr"}

// TestEveryReasonIsDocumented: each service's proto lists, in the comment
// of its service (what `grpcurl describe` shows), every reason its code
// and the shared runtime can give.
func TestEveryReasonIsDocumented(t *testing.T) {
	for _, c := range []struct {
		service, proto string
		dirs           []string
		// notGiven are reasons the code names without giving them: the
		// allocator's, which membership's registry acts on.
		notGiven []string
	}{
		{service: "AllocatorService", proto: "proto/plexus/allocator/v1/allocator.proto", dirs: []string{"services/allocator", "internal/netparse"}},
		{service: "MembershipService", proto: "proto/plexus/membership/v1/membership.proto", dirs: []string{"services/membership"},
			notGiven: []string{"ALLOCATION_NOT_FOUND", "OWNER_MISMATCH"}},
		{service: "ImporterService", proto: "proto/plexus/importer/v1/importer.proto", dirs: []string{"services/importer"}},
		{service: "RepairService", proto: "proto/plexus/repair/v1/repair.proto", dirs: []string{"services/repair"}},
	} {
		t.Run(c.service, func(t *testing.T) {
			var dirs []string
			for _, d := range append(c.dirs, runtime...) {
				dirs = append(dirs, filepath.Join(root, d))
			}
			used, err := reasondoc.Used(dirs...)
			require.NoError(t, err)
			require.Contains(t, used, "RATE_LIMIT_EXCEEDED", "the runtime's reasons are found")
			missing, err := reasondoc.Undocumented(filepath.Join(root, c.proto), c.service, used, c.notGiven...)
			require.NoError(t, err)
			require.Empty(t, missing, "reasons %s can give that the comment of service %s in %s does not name", c.service, c.service, c.proto)
		})
	}
}

// TestUsedFindsReasonsWhereTheyAreGiven: a literal is a reason where it is
// given (a Reason field, a Reason constant, a call's argument), not where
// it is compared or switched on.
func TestUsedFindsReasonsWhereTheyAreGiven(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.go"), `package a

const ReasonFoo = "FOO_GIVEN"
const other = "NOT_A_REASON_CONST"

var table = []struct{ Reason string }{{Reason: "IN_TABLE"}}

func f(err error) error {
	if reason(err) == "COMPARED_ONLY" {
		return nil
	}
	switch reason(err) {
	case "SWITCHED_ON":
	}
	_ = map[string]int{"MAP_KEY": 1}
	return newErr("AS_ARGUMENT", "lower case")
}
`)
	writeFile(t, filepath.Join(dir, "a_test.go"), `package a

func g() { newErr("IN_A_TEST") }
`)
	writeFile(t, filepath.Join(dir, "testdata", "b.go"), `package b

func h() { newErr("IN_TESTDATA") }
`)
	used, err := reasondoc.Used(dir)
	require.NoError(t, err)
	require.Equal(t, []string{"AS_ARGUMENT", "FOO_GIVEN", "IN_TABLE"}, used)
}

func TestUndocumented(t *testing.T) {
	proto := filepath.Join(t.TempDir(), "x.proto")
	writeFile(t, proto, `syntax = "proto3";

// Not this one: FAR_AWAY.
message M {}

// XService does x.
//
// Reasons: KNOWN, ALSO_KNOWN (and KNOWN_PREFIX_NOT).
service XService {
  rpc Do(M) returns (M);
}
`)
	missing, err := reasondoc.Undocumented(proto, "XService", []string{"ALSO_KNOWN", "FAR_AWAY", "KNOWN", "KNOWN_PREFIX", "SKIPPED"}, "SKIPPED")
	require.NoError(t, err)
	require.Equal(t, []string{"FAR_AWAY", "KNOWN_PREFIX"}, missing)
	missing, err = reasondoc.Undocumented(proto, "NoSuchService", []string{"KNOWN"})
	require.NoError(t, err)
	require.Equal(t, []string{"KNOWN"}, missing, "a service not in the file documents nothing")
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
}

package version

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// semver is a release version as the VERSION file names it: MAJOR.MINOR.PATCH
// with an optional pre-release part.
var semver = regexp.MustCompile(`^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)

func TestVersionIsTheFile(t *testing.T) {
	b, err := os.ReadFile("../../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := Version(), strings.TrimSpace(string(b)); got != want {
		t.Fatalf("Version() = %q, the VERSION file says %q", got, want)
	}
	if !semver.MatchString(Version()) {
		t.Fatalf("VERSION %q is not a semantic version", Version())
	}
	if s := String(); !strings.HasPrefix(s, Version()+" (commit ") {
		t.Fatalf("String() = %q", s)
	}
}

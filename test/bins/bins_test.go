// Package bins checks what every binary `make build` puts in bin/ promises
// its user: --help prints a usage and exits 0, and --version names the
// release of the VERSION file.
package bins

import (
	"bytes"
	"os"
	"os/exec"
	"path"
	"regexp"
	"strings"
	"testing"

	"github.com/plexusnet/plexus/internal/testing/proctest"
	"github.com/plexusnet/plexus/internal/version"
)

// built reads the main packages `make build` builds from the Makefile, so
// that a binary added there is checked here too.
func built(t *testing.T) []string {
	b, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, "-o bin/ ") {
			pkgs := regexp.MustCompile(`\./[a-z/]+`).FindAllString(line, -1)
			if len(pkgs) < 8 {
				t.Fatalf("the Makefile's build line names %d packages: %q", len(pkgs), line)
			}
			return pkgs
		}
	}
	t.Fatal("no `-o bin/` line in the Makefile")
	return nil
}

func TestEveryBinaryAnswersHelpAndVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every binary")
	}
	for _, pkg := range built(t) {
		t.Run(path.Base(pkg), func(t *testing.T) {
			bin := proctest.Build(t, pkg)
			var out bytes.Buffer
			help := exec.Command(bin, "--help")
			help.Stdout, help.Stderr = &out, &out
			if err := help.Run(); err != nil {
				t.Fatalf("%s --help: %v\n%s", pkg, err, out.String())
			}
			if !strings.Contains(strings.ToLower(out.String()), "usage") {
				t.Fatalf("%s --help prints no usage:\n%s", pkg, out.String())
			}
			v, err := exec.Command(bin, "--version").CombinedOutput()
			if err != nil {
				t.Fatalf("%s --version: %v\n%s", pkg, err, v)
			}
			if want := " version " + version.Version() + " (commit "; !strings.Contains(string(v), want) {
				t.Fatalf("%s --version = %q, want it to contain %q", pkg, v, want)
			}
		})
	}
}

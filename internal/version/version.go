// Package version says what a binary was built from: the release in the
// VERSION file and the commit, so `--version` of every binary and
// `plexusctl version` name both.
package version

import (
	"runtime/debug"
	"sync"

	"github.com/plexusnet/plexus"
)

// commit is stamped at build time where Go cannot read it from the
// checkout (an image build without .git): -ldflags "-X
// github.com/plexusnet/plexus/internal/version.commit=<sha>".
var commit string

// Version returns the release the binary is, or is on its way to.
func Version() string { return plexus.Version }

// Commit returns the commit the binary was built from, abbreviated to 12
// characters and with "-modified" when the tree had uncommitted changes;
// "unknown" when the build recorded none.
var Commit = sync.OnceValue(func() string {
	if commit != "" {
		return short(commit)
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = "-modified"
			}
		}
	}
	if rev == "" {
		return "unknown"
	}
	return short(rev) + modified
})

func short(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}

// String is what `--version` prints after the binary's name:
// "0.1.0 (commit 0123456789ab)".
func String() string { return Version() + " (commit " + Commit() + ")" }

// Asked reports whether args, a command's arguments, ask only for its
// version (--version or -version), for the commands built on package flag.
func Asked(args []string) bool {
	return len(args) == 1 && (args[0] == "--version" || args[0] == "-version")
}

// Line is what `NAME --version` prints, as cobra's commands print it:
// "NAME version 0.1.0 (commit 0123456789ab)".
func Line(name string) string { return name + " version " + String() }

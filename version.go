// Package plexus holds what belongs to the whole project rather than to one
// service: the version every binary is built as.
package plexus

import (
	_ "embed"
	"strings"
)

//go:embed VERSION
var versionFile string

// Version is the release this source tree is, or is on its way to: the
// contents of the VERSION file ("0.1.0", or "0.2.0-dev" between releases).
var Version = strings.TrimSpace(versionFile)

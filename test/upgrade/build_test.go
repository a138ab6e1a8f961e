// Package upgrade tests upgrades from the last release (the last line of
// RELEASES) to this tree and back, as docs/upgrade.md promises them: the
// release's binaries are built from its commit once and cached, and run
// beside this tree's on the same stores, etcd and clusters.
package upgrade

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReleaseBuild: the release's five binaries are built from its commit
// and name its version and commit; this tree's name the next version.
func TestReleaseBuild(t *testing.T) {
	rel, cur := release(t), current(t)
	root, err := moduleRoot()
	require.NoError(t, err)
	_, commit, err := lastRelease(root)
	require.NoError(t, err)
	require.NotEqual(t, rel.Version, cur.Version, "VERSION names the next release, not the last one")
	out, err := exec.Command(rel.Plexusctl, "version").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, "plexusctl "+rel.Version+" (commit "+commit[:12]+")", strings.TrimSpace(string(out)))
	out, err = exec.Command(cur.Plexusctl, "version").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.True(t, strings.HasPrefix(string(out), "plexusctl "+cur.Version+" "), "plexusctl version of this tree: %s", out)
}

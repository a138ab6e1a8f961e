package main

import (
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/internal/testing/proctest"
)

// TestHelp: --help lists the commands and their flags and exits 0; an
// unknown command points at --help.
func TestHelp(t *testing.T) {
	bin := proctest.Build(t, "./hack/tracedump")
	out, err := exec.Command(bin, "--help").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "serve")
	require.Contains(t, string(out), "flow")
	require.Contains(t, string(out), "-http")

	out, err = exec.Command(bin, "nonsense").CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "tracedump --help")
}

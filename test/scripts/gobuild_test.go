// Package scripts tests the shell scripts under hack/ that a newcomer's
// first run depends on.
package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	return dir
}

// gobuild runs hack/gobuild.sh in the module with a build cache of its own
// (so that something is compiled) and a progress line every second.
func gobuild(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(root(t), "hack", "gobuild.sh"), args...)
	cmd.Dir = root(t)
	cmd.Env = append(os.Environ(), "GOCACHE="+t.TempDir(), "PLEXUS_PROGRESS_EVERY=1", "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestGobuildSaysHowFarItGot: a build that takes more than the interval
// prints progress lines with a package count against the total and the
// time spent, and produces the binary.
func TestGobuildSaysHowFarItGot(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "tracedump")
	out, err := gobuild(t, "tracedump", "-trimpath", "-o", bin, "./hack/tracedump")
	require.NoError(t, err, out)
	line := regexp.MustCompile(`(?m)^tracedump: (\d+) packages compiled \(of at most (\d+)\), \dm\d\ds$`)
	lines := line.FindAllStringSubmatch(out, -1)
	require.NotEmpty(t, lines, "no progress line in:\n%s", out)
	require.NotEqual(t, "0", lines[len(lines)-1][1], "the last progress line counts compiled packages:\n%s", out)
	info, err := os.Stat(bin)
	require.NoError(t, err)
	require.NotZero(t, info.Size())
}

// TestGobuildFailureShowsTheError: a build that fails exits non-zero and
// shows the compiler's error, not only package names.
func TestGobuildFailureShowsTheError(t *testing.T) {
	dir := filepath.Join(root(t), "test", "scripts", "testdata", "broken")
	require.DirExists(t, dir)
	out, err := gobuild(t, "broken", "-o", t.TempDir(), "./test/scripts/testdata/broken")
	require.Error(t, err)
	require.Contains(t, out, "undefined: notDefined")
	require.True(t, strings.HasSuffix(strings.TrimSpace(out), "broken: build failed"), out)
}

// TestProgressSaysItStillRuns: a quiet command that runs longer than the
// interval gets "still running" lines; a failing one shows its output and
// fails.
func TestProgressSaysItStillRuns(t *testing.T) {
	run := func(args ...string) (string, error) {
		cmd := exec.Command(filepath.Join(root(t), "hack", "progress.sh"), args...)
		cmd.Env = append(os.Environ(), "PLEXUS_PROGRESS_EVERY=1")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("modules", "sh", "-c", "echo quiet; sleep 3")
	require.NoError(t, err, out)
	require.Regexp(t, `(?m)^modules: still running, 0m0[1-3]s$`, out)
	require.NotContains(t, out, "quiet", "a command that succeeds stays quiet")

	out, err = run("modules", "sh", "-c", "echo boom >&2; exit 3")
	require.Error(t, err)
	require.Contains(t, out, "boom")
	require.True(t, strings.HasSuffix(strings.TrimSpace(out), "modules: failed"), out)
}

// TestScratchModule: hack/cache.sh's scratch_module, the start of every
// tool build, leaves the script in a new module that requires what it
// names, with GOBUILD and PROGRESS set, and removes the folder when the
// script exits. The module comes from the module cache (this module's own
// dependency), so the test needs no network.
func TestScratchModule(t *testing.T) {
	version, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "github.com/spf13/pflag").Output()
	require.NoError(t, err)
	want := "github.com/spf13/pflag@" + strings.TrimSpace(string(version))
	script := `source hack/cache.sh
scratch_module demo "$1"
pwd
head -1 go.mod
go list -m -f '{{.Path}}@{{.Version}}' github.com/spf13/pflag
test -x "$GOBUILD" && test -x "$PROGRESS" && echo tools`
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script, "scratch", want)
	cmd.Dir = root(t)
	cmd.Env = append(os.Environ(), "GOPROXY=off", "GOSUMDB=off", "GOFLAGS=-mod=mod")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Equal(t, []string{lines[0], "module plexus.local/demobuild", want, "tools"}, lines)
	require.NotEqual(t, root(t), lines[0], "the script moved to the scratch module")
	require.NoDirExists(t, lines[0], "the scratch folder goes when the script exits")
}

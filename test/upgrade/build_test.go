// Package upgrade tests upgrades from the last release (the last line of
// RELEASES) to this tree and back, as docs/upgrade.md promises them: the
// release's binaries are built from its commit once and cached, and run
// beside this tree's on the same stores, etcd and clusters.
package upgrade

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

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

// TestParseReleases: the last release of a RELEASES file, and the lines
// that are refused.
func TestParseReleases(t *testing.T) {
	v, c, err := parseReleases(strings.NewReader("# comment\n\nv0.1.0 " + strings.Repeat("a", 40) + " 2026-11-28\nv0.2.0 " + strings.Repeat("b", 40) + "\n"))
	require.NoError(t, err)
	require.Equal(t, "v0.2.0", v)
	require.Equal(t, strings.Repeat("b", 40), c)
	for _, bad := range []string{"", "# only a comment\n", "v0.1.0\n", "v0.1.0 --upload-pack=x\n", "0.1.0 " + strings.Repeat("a", 40), "v0.1.0 " + strings.Repeat("A", 40)} {
		_, _, err := parseReleases(strings.NewReader(bad))
		require.Error(t, err, "%q", bad)
	}
}

// FuzzParseReleases: any input gives a release of the right shape or an
// error, never a panic.
func FuzzParseReleases(f *testing.F) {
	f.Add("v0.1.0 fbd715bfdcc73114e9163f79dd501f530379cff0 2026-11-28\n")
	f.Add("# c\n\nv1.2.3 " + strings.Repeat("0", 40))
	f.Add("v0.1.0")
	f.Fuzz(func(t *testing.T, in string) {
		v, c, err := parseReleases(strings.NewReader(in))
		if err != nil {
			return
		}
		if !releaseVersion.MatchString(v) || !releaseCommit.MatchString(c) {
			t.Fatalf("parsed %q %q from %q", v, c, in)
		}
	})
}

// TestExportTreeMissingCommit: a commit the clone lacks fails with a
// message that says so, not with git's error alone.
func TestExportTreeMissingCommit(t *testing.T) {
	root, err := moduleRoot()
	require.NoError(t, err)
	err = exportTree(root, strings.Repeat("0", 40), t.TempDir())
	require.ErrorContains(t, err, "is not in this clone")
}

// TestUnderLockOneBuilds: of two callers of underLock on one lock file
// (each opens it, as two processes do), the first builds; the second
// waits on the lock while it does, then finds the build done and builds
// nothing.
func TestUnderLockOneBuilds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "release.lock")
	var done atomic.Bool
	built := func() error {
		if done.Load() {
			return nil
		}
		return errors.New("not built")
	}
	building, finish := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- underLock(path, built, func() error {
			close(building)
			<-finish
			done.Store(true)
			return nil
		})
	}()
	<-building

	var builds atomic.Int32
	second := make(chan error, 1)
	go func() {
		second <- underLock(path, built, func() error { builds.Add(1); return nil })
	}()
	fi, err := os.Stat(path)
	require.NoError(t, err)
	inode := fi.Sys().(*syscall.Stat_t).Ino
	require.Eventually(t, func() bool { return lockWaiters(t, inode) == 1 }, 10*time.Second, time.Millisecond,
		"the second caller waits on the lock while the first builds")
	close(finish)
	require.NoError(t, <-first)
	require.NoError(t, <-second)
	require.Zero(t, builds.Load(), "the second caller found the first one's build")
}

// lockWaiters counts the requests blocked on a flock of the file with
// inode, from /proc/locks (a blocked request is listed with "->").
func lockWaiters(t *testing.T, inode uint64) int {
	t.Helper()
	raw, err := os.ReadFile("/proc/locks")
	require.NoError(t, err)
	n := 0
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		// "2: -> FLOCK  ADVISORY  WRITE 1234 00:2a:5678 0 EOF"
		if len(f) >= 7 && f[1] == "->" && f[2] == "FLOCK" && strings.HasSuffix(f[6], fmt.Sprintf(":%d", inode)) {
			n++
		}
	}
	return n
}

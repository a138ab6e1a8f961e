package upgrade

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/plexusnet/plexus/internal/testing/proctest"
)

// services are the four services' main packages, by the name their
// binaries carry ("plexus-" + name).
var services = []string{"allocator", "membership", "importer", "repair"}

// Build is one build of Plexus: the paths of its five binaries.
type Build struct {
	// Name says which build it is in messages: "v0.1.0" or "new".
	Name string
	// Version is what its --version names (the VERSION file).
	Version    string
	Allocator  string
	Membership string
	Importer   string
	Repair     string
	Plexusctl  string
}

// Service returns the binary of service (one of services).
func (b *Build) Service(name string) string {
	switch name {
	case "allocator":
		return b.Allocator
	case "membership":
		return b.Membership
	case "importer":
		return b.Importer
	case "repair":
		return b.Repair
	}
	panic("no service " + name)
}

// lastRelease reads the last release RELEASES names: version and commit.
func lastRelease(root string) (version, commit string, err error) {
	f, err := os.Open(filepath.Join(root, "RELEASES"))
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	version, commit, err = parseReleases(f)
	if err != nil {
		return "", "", fmt.Errorf("RELEASES: %w", err)
	}
	return version, commit, nil
}

var (
	releaseVersion = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.]+)?$`)
	releaseCommit  = regexp.MustCompile(`^[0-9a-f]{40}$`)
)

// parseReleases reads a RELEASES file ("VERSION COMMIT DATE" lines,
// oldest first, with # comments) and returns its last release. The
// version must be vX.Y.Z and the commit 40 hex digits: both end up in
// paths and on git's command line.
func parseReleases(r io.Reader) (version, commit string, err error) {
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 2 || !releaseVersion.MatchString(fields[0]) || !releaseCommit.MatchString(fields[1]) {
			return "", "", fmt.Errorf("line %d is not \"vX.Y.Z <40 hex digits of the commit> [date]\"", n)
		}
		version, commit = fields[0], fields[1]
	}
	if err := sc.Err(); err != nil {
		return "", "", err
	}
	if commit == "" {
		return "", "", errors.New("no release")
	}
	return version, commit, nil
}

// moduleRoot is the folder holding go.mod, two levels above this package.
func moduleRoot() (string, error) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return "", fmt.Errorf("go.mod not found at %s: %w", root, err)
	}
	return root, nil
}

// cacheRoot is where the project caches what it builds once (the kube
// binaries of hack/kube-binaries.sh, the release builds).
func cacheRoot() (string, error) {
	if c := os.Getenv("PLEXUS_CACHE"); c != "" {
		return c, nil
	}
	if x := os.Getenv("XDG_CACHE_HOME"); x != "" {
		return filepath.Join(x, "plexus"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, ".cache", "plexus"), nil
}

var (
	releaseOnce  sync.Once
	releaseBuild *Build
	releaseErr   error
)

// release returns the build of the last release, built from its commit
// the first time and taken from the cache after. Without git or the commit
// the test fails (under -short it is skipped).
func release(t testing.TB) *Build {
	t.Helper()
	releaseOnce.Do(func() { releaseBuild, releaseErr = buildRelease() })
	if releaseErr != nil {
		if testing.Short() {
			t.Skipf("skipping in -short: the last release is not built: %v", releaseErr)
		}
		t.Fatalf("the last release is not built: %v", releaseErr)
	}
	return releaseBuild
}

// current returns the build of this tree (proctest builds it once per test
// process).
func current(t testing.TB) *Build {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	v, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	return &Build{
		Name:       "new",
		Version:    strings.TrimSpace(string(v)),
		Allocator:  proctest.Build(t, "./services/allocator"),
		Membership: proctest.Build(t, "./services/membership"),
		Importer:   proctest.Build(t, "./services/importer"),
		Repair:     proctest.Build(t, "./services/repair"),
		Plexusctl:  proctest.Build(t, "./clients/plexusctl"),
	}
}

// buildRelease builds the release RELEASES names last into
// CACHE/release-COMMIT/bin, or finds it built there. One process builds at
// a time (a lock file beside the folder); a second waits, then finds the
// binaries.
func buildRelease() (*Build, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	version, commit, err := lastRelease(root)
	if err != nil {
		return nil, err
	}
	cache, err := cacheRoot()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(cache, "release-"+commit)
	b := releaseBinaries(version, dir)
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return nil, err
	}
	err = underLock(dir+".lock", func() error { return b.works(commit) }, func() error {
		if err := exportTree(root, commit, filepath.Join(dir, "src")); err != nil {
			return err
		}
		if err := compile(filepath.Join(dir, "src"), filepath.Join(dir, "bin"), commit); err != nil {
			return err
		}
		if err := b.works(commit); err != nil {
			return fmt.Errorf("the build of %s %s does not work: %w", version, commit, err)
		}
		// The binaries are what is kept; the tree is exported again if
		// they are ever missing.
		return os.RemoveAll(filepath.Join(dir, "src"))
	})
	return b, err
}

// underLock runs build unless built says its result is there already:
// under the lock file at path, and after checking built again once the
// lock is taken, so that of several processes one builds and the others
// wait for it and find its result.
func underLock(path string, built, build func() error) error {
	if built() == nil {
		return nil
	}
	lock, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %w", path, err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck // closed right after
	if built() == nil {
		return nil // another process built it while this one waited
	}
	return build()
}

// releaseBinaries names the binaries of the build in dir.
func releaseBinaries(version, dir string) *Build {
	bin := filepath.Join(dir, "bin")
	return &Build{
		Name:       version,
		Version:    strings.TrimPrefix(version, "v"),
		Allocator:  filepath.Join(bin, "plexus-allocator"),
		Membership: filepath.Join(bin, "plexus-membership"),
		Importer:   filepath.Join(bin, "plexus-importer"),
		Repair:     filepath.Join(bin, "plexus-repair"),
		Plexusctl:  filepath.Join(bin, "plexusctl"),
	}
}

// works runs every binary's --version: each must name the release and the
// commit it was stamped with.
func (b *Build) works(commit string) error {
	want := b.Version + " (commit " + commit[:12] + ")"
	for _, bin := range []string{b.Allocator, b.Membership, b.Importer, b.Repair, b.Plexusctl} {
		out, err := exec.Command(bin, "--version").CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s --version: %v: %s", bin, err, bytes.TrimSpace(out))
		}
		if !strings.Contains(string(out), want) {
			return fmt.Errorf("%s --version says %q, not %q", bin, bytes.TrimSpace(out), want)
		}
	}
	return nil
}

// exportTree writes the tree of commit into dst, afresh.
func exportTree(root, commit, dst string) error {
	if _, err := exec.LookPath("git"); err != nil {
		return fmt.Errorf("git is needed to export the release's tree: %w", err)
	}
	if out, err := exec.Command("git", "-C", root, "cat-file", "-e", commit+"^{commit}").CombinedOutput(); err != nil {
		return fmt.Errorf("commit %s of RELEASES is not in this clone (a shallow clone? fetch the full history): %v %s", commit, err, bytes.TrimSpace(out))
	}
	if err := os.RemoveAll(dst); err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	archive := exec.Command("git", "-C", root, "archive", "--format=tar", commit)
	untar := exec.Command("tar", "-x", "-C", dst)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return err
	}
	untar.Stdin = pipe
	var errs bytes.Buffer
	archive.Stderr, untar.Stderr = &errs, &errs
	if err := untar.Start(); err != nil {
		return err
	}
	if err := archive.Run(); err != nil {
		_ = untar.Wait()
		return fmt.Errorf("git archive %s: %v %s", commit, err, errs.Bytes())
	}
	if err := untar.Wait(); err != nil {
		return fmt.Errorf("tar -x: %v %s", err, errs.Bytes())
	}
	return nil
}

// compile builds the five binaries of the tree in src into bin, static and
// stamped with the commit as the release's Makefile does.
func compile(src, bin, commit string) error {
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return err
	}
	args := []string{"build", "-ldflags", "-X github.com/plexusnet/plexus/internal/version.commit=" + commit[:12], "-o", bin + "/"}
	for _, s := range services {
		args = append(args, "./services/"+s)
	}
	args = append(args, "./clients/plexusctl")
	cmd := exec.Command("go", args...)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build of the release in %s: %v\n%s", src, err, out)
	}
	for _, s := range services {
		if err := os.Rename(filepath.Join(bin, s), filepath.Join(bin, "plexus-"+s)); err != nil {
			return err
		}
	}
	return nil
}

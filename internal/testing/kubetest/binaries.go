package kubetest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Pinned versions; hack/kube-binaries.sh builds exactly these.
const (
	KubeVersion = "v1.36.3"
	EtcdVersion = "v3.6.16"
)

// Environment variables that locate the binaries, shared with
// hack/kube-binaries.sh.
const (
	// EnvKubeBin names the folder holding etcd and kube-apiserver.
	EnvKubeBin = "PLEXUS_KUBE_BIN"
	// EnvCache names the cache root; the binaries are in a versioned
	// folder below it.
	EnvCache = "PLEXUS_CACHE"
)

// BuildCommand is what a developer runs to build the binaries.
const BuildCommand = "make kube-binaries"

// ErrBinariesMissing means etcd or kube-apiserver has not been built.
var ErrBinariesMissing = errors.New("kube-apiserver and etcd binaries not found")

// Binaries locates the control plane executables.
type Binaries struct {
	// Dir holds the etcd and kube-apiserver executables.
	Dir string
}

// Etcd is the path of the etcd executable.
func (b Binaries) Etcd() string { return filepath.Join(b.Dir, "etcd") }

// APIServer is the path of the kube-apiserver executable.
func (b Binaries) APIServer() string { return filepath.Join(b.Dir, "kube-apiserver") }

// DefaultBinDir is where hack/kube-binaries.sh puts the binaries when
// PLEXUS_KUBE_BIN is not set: $PLEXUS_CACHE, else $XDG_CACHE_HOME/plexus,
// else $HOME/.cache/plexus, then a folder named after both versions.
func DefaultBinDir() (string, error) {
	cache, err := cacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(cache, "kube-"+KubeVersion+"-etcd-"+EtcdVersion), nil
}

// cacheDir is the cache root the build scripts share: $PLEXUS_CACHE, else
// $XDG_CACHE_HOME/plexus, else $HOME/.cache/plexus.
func cacheDir() (string, error) {
	if cache := os.Getenv(EnvCache); cache != "" {
		return cache, nil
	}
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("locate the cache folder: %w", err)
		}
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "plexus"), nil
}

// CoreDNSVersion is the CoreDNS hack/coredns.sh builds.
const CoreDNSVersion = "v1.15.0"

// FindCoreDNS returns the CoreDNS binary hack/coredns.sh built
// ($PLEXUS_COREDNS, else the cache), or an error naming the command that
// builds it.
func FindCoreDNS() (string, error) {
	return findTool("CoreDNS", "PLEXUS_COREDNS", "coredns-"+CoreDNSVersion, "coredns", "make coredns")
}

// findTool returns the binary of a tool a hack/ script built and cached:
// $env when set, else name in the cache folder dir; or an error naming
// the command that builds it.
func findTool(tool, env, dir, name, build string) (string, error) {
	path := os.Getenv(env)
	if path == "" {
		cache, err := cacheDir()
		if err != nil {
			return "", err
		}
		path = filepath.Join(cache, dir, name)
	}
	info, err := os.Stat(path)
	if err != nil || info.IsDir() || info.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%s not built at %s: run %s", tool, path, build)
	}
	return path, nil
}

// RequireCoreDNS returns the CoreDNS binary hack/coredns.sh built
// ($PLEXUS_COREDNS, else the cache). Like RequireBinaries, a missing binary
// fails the test with the command that builds it; only `go test -short`
// skips it.
func RequireCoreDNS(t testing.TB) string {
	t.Helper()
	return requireCoreDNS(t, testing.Short())
}

// requireCoreDNS is RequireCoreDNS with -short as an argument.
func requireCoreDNS(t testing.TB, short bool) string {
	t.Helper()
	path, err := FindCoreDNS()
	return required(t, short, path, err)
}

// HelmVersion is the helm hack/helm.sh builds.
const HelmVersion = "v3.22.0"

// FindHelm returns the helm binary hack/helm.sh built ($PLEXUS_HELM, else
// the cache), or an error naming the command that builds it.
func FindHelm() (string, error) {
	return findTool("helm", "PLEXUS_HELM", "helm-"+HelmVersion, "helm", "make helm")
}

// RequireHelm returns the helm binary hack/helm.sh built. Like
// RequireBinaries, a missing binary fails the test with the command that
// builds it; only `go test -short` skips it.
func RequireHelm(t testing.TB) string {
	t.Helper()
	return requireHelm(t, testing.Short())
}

// requireHelm is RequireHelm with -short as an argument.
func requireHelm(t testing.TB, short bool) string {
	t.Helper()
	path, err := FindHelm()
	return required(t, short, path, err)
}

// FindBinaries returns the binaries named by PLEXUS_KUBE_BIN, else those in
// DefaultBinDir. It fails with ErrBinariesMissing when either is absent.
func FindBinaries() (Binaries, error) {
	dir := os.Getenv(EnvKubeBin)
	if dir == "" {
		var err error
		if dir, err = DefaultBinDir(); err != nil {
			return Binaries{}, err
		}
	}
	return BinariesIn(dir)
}

// BinariesIn returns the binaries in dir, failing with ErrBinariesMissing
// when either is absent.
func BinariesIn(dir string) (Binaries, error) {
	b := Binaries{Dir: dir}
	for _, path := range []string{b.Etcd(), b.APIServer()} {
		info, err := os.Stat(path)
		if err != nil || info.IsDir() || info.Mode()&0o111 == 0 {
			return Binaries{}, fmt.Errorf("%w: no executable %s (build them with %q or set %s)",
				ErrBinariesMissing, path, BuildCommand, EnvKubeBin)
		}
	}
	return b, nil
}

// RequireBinaries returns the binaries for a test. When they are missing the
// test fails and names the command that builds them (make test builds them
// first), so no run passes without the Kubernetes tests by accident; only
// `go test -short` skips them.
func RequireBinaries(t testing.TB) Binaries {
	t.Helper()
	return requireBinaries(t, testing.Short())
}

// requireBinaries is RequireBinaries with -short as an argument, so both of
// its paths can be tested.
func requireBinaries(t testing.TB, short bool) Binaries {
	t.Helper()
	b, err := FindBinaries()
	return required(t, short, b, err)
}

// required returns v when err is nil. Otherwise what the test needs is
// missing: the test fails with err, which names what builds it, or under
// -short (short) it is skipped.
func required[T any](t testing.TB, short bool, v T, err error) T {
	t.Helper()
	switch {
	case err == nil:
		return v
	case short:
		t.Skipf("skipping in -short: %v", err)
	default:
		t.Fatalf("%v (or run go test -short to skip the tests that need it)", err)
	}
	return v
}

package kubetest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDefaultBinDir(t *testing.T) {
	versioned := "kube-" + KubeVersion + "-etcd-" + EtcdVersion
	tests := []struct {
		name             string
		cache, xdg, home string
		want             string
	}{
		{name: "PLEXUS_CACHE wins", cache: "/c", xdg: "/x", home: "/h", want: "/c/" + versioned},
		{name: "XDG_CACHE_HOME", xdg: "/x", home: "/h", want: "/x/plexus/" + versioned},
		{name: "HOME", home: "/h", want: "/h/.cache/plexus/" + versioned},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(EnvCache, tc.cache)
			t.Setenv("XDG_CACHE_HOME", tc.xdg)
			t.Setenv("HOME", tc.home)
			got, err := DefaultBinDir()
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestFindBinaries(t *testing.T) {
	tests := []struct {
		name    string
		files   map[string]os.FileMode
		wantErr bool
	}{
		{name: "both", files: map[string]os.FileMode{"etcd": 0o755, "kube-apiserver": 0o755}},
		{name: "no apiserver", files: map[string]os.FileMode{"etcd": 0o755}, wantErr: true},
		{name: "not executable", files: map[string]os.FileMode{"etcd": 0o644, "kube-apiserver": 0o755}, wantErr: true},
		{name: "empty", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, mode := range tc.files {
				require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), mode))
			}
			t.Setenv(EnvKubeBin, dir)
			b, err := FindBinaries()
			if tc.wantErr {
				require.ErrorIs(t, err, ErrBinariesMissing)
				require.ErrorContains(t, err, BuildCommand)
				return
			}
			require.NoError(t, err)
			require.Equal(t, filepath.Join(dir, "etcd"), b.Etcd())
			require.Equal(t, filepath.Join(dir, "kube-apiserver"), b.APIServer())
		})
	}
}

// recordingTB stands in for a test so the skip and fatal paths of
// RequireBinaries and RequireCoreDNS can be observed without ending the real
// test.
type recordingTB struct {
	testing.TB
	skipped, failed string
}

func (r *recordingTB) Helper()                           {}
func (r *recordingTB) Skipf(format string, args ...any)  { r.skipped = fmt.Sprintf(format, args...) }
func (r *recordingTB) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

func TestRequireMissing(t *testing.T) {
	tests := []struct {
		name    string
		require func(tb testing.TB, short bool)
		command string
	}{
		{name: "kube binaries", require: func(tb testing.TB, short bool) { requireBinaries(tb, short) }, command: BuildCommand},
		{name: "coredns", require: func(tb testing.TB, short bool) { requireCoreDNS(tb, short) }, command: "make coredns"},
		{name: "helm", require: func(tb testing.TB, short bool) { requireHelm(tb, short) }, command: "make helm"},
	}
	for _, tc := range tests {
		for _, short := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s short=%v", tc.name, short), func(t *testing.T) {
				empty := t.TempDir()
				t.Setenv(EnvKubeBin, empty)
				t.Setenv("PLEXUS_COREDNS", filepath.Join(empty, "coredns"))
				t.Setenv("PLEXUS_HELM", filepath.Join(empty, "helm"))
				r := &recordingTB{TB: t}
				tc.require(r, short)
				if short {
					require.Contains(t, r.skipped, tc.command)
					require.Empty(t, r.failed)
					return
				}
				// CI or not, a missing binary fails and says how to build it.
				require.Contains(t, r.failed, tc.command)
				require.Contains(t, r.failed, "-short")
				require.Empty(t, r.skipped)
			})
		}
	}
}

package e2e

import (
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/plexusnet/plexus/internal/auth"
)

// TestComposeMutualTLSAndPolicy: every Plexus service of
// docker-compose.yaml serves mutual TLS with its own folder of `make certs`
// (and no other key) — a member cluster's service with its cluster's —,
// calls its peers over TLS, and enforces its own policy from deploy/policy.
func TestComposeMutualTLSAndPolicy(t *testing.T) {
	root := filepath.Join("..", "..")
	raw, err := os.ReadFile(filepath.Join(root, "docker-compose.yaml"))
	require.NoError(t, err)
	var f struct {
		Services map[string]struct {
			Build *struct {
				Target string `json:"target"`
			} `json:"build"`
			Environment map[string]string `json:"environment"`
			Volumes     []string          `json:"volumes"`
		} `json:"services"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &f))
	checked := 0
	for name, svc := range f.Services {
		if svc.Build == nil || !plexusServices[svc.Build.Target] {
			continue // etcd, jaeger, the kube-apiserver and its one-shot setup
		}
		target := svc.Build.Target
		// Container path → host path of the service's bind mounts.
		mounts := map[string]string{}
		for _, v := range svc.Volumes {
			// host:container:mode, where host may hold ${VAR:-default}.
			parts := strings.Split(v, ":")
			require.GreaterOrEqual(t, len(parts), 3, "%s: volume %q is host:container:mode", name, v)
			n := len(parts)
			require.Equal(t, "ro", parts[n-1], "%s: %s is mounted read-only", name, parts[n-2])
			mounts[parts[n-2]] = strings.Join(parts[:n-2], ":")
		}
		// hostFile resolves a file the service reads to the file on the host.
		hostFile := func(file string) string {
			if host, ok := mounts[file]; ok {
				return host
			}
			host, ok := mounts[path.Dir(file)]
			require.True(t, ok, "%s: %s is not on a mounted volume", name, file)
			return host + "/" + path.Base(file)
		}
		env := func(key string) string {
			v := svc.Environment[key]
			require.NotEmpty(t, v, "%s sets %s", name, key)
			return v
		}

		// The allocator is the fleet's; every other service acts for its
		// cluster, with that cluster's certificate (make certs).
		certs := "${PLEXUS_CERTS_DIR:-./.certs}/" + target
		if target != "allocator" {
			certs = "${PLEXUS_CERTS_DIR:-./.certs}/" + env("PLEXUS_CLUSTER_NAME") + "/" + target
		}
		require.Equal(t, certs+"/tls.crt", hostFile(env("PLEXUS_TLS_CERT")), name)
		require.Equal(t, certs+"/tls.key", hostFile(env("PLEXUS_TLS_KEY")), name)
		require.Equal(t, certs+"/ca.crt", hostFile(env("PLEXUS_TLS_CLIENT_CA")), name)
		if target != "allocator" {
			require.Equal(t, env("PLEXUS_TLS_CLIENT_CA"), env("PLEXUS_PEER_CA"), "%s verifies its peers against the CA", name)
		}
		for _, host := range mounts {
			require.NotContains(t, host, "ca.key", "%s: the CA key stays on the host", name)
		}

		policy := hostFile(env("PLEXUS_AUTHZ_POLICY"))
		require.Equal(t, "./deploy/policy/"+target+".json", policy, name)
		p, err := auth.LoadPolicy(filepath.Join(root, filepath.FromSlash(policy)))
		require.NoError(t, err)
		require.Equal(t, target, p.Name())
		checked++
	}
	require.Equal(t, 7, checked, "two allocators, a membership and an importer per cluster, repair")
}

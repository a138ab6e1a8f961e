package deploy

import (
	"path"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/plexusnet/plexus/deploy/policy"
	"github.com/plexusnet/plexus/internal/auth"
)

// volume returns the pod's volume name.
func volume(t *testing.T, spec corev1.PodSpec, name string) corev1.Volume {
	t.Helper()
	for _, v := range spec.Volumes {
		if v.Name == name {
			return v
		}
	}
	require.Failf(t, "no volume", "the pod has no volume %q", name)
	return corev1.Volume{}
}

// mountOf returns the read-only volume file is on, and file's name in it.
func mountOf(t *testing.T, spec corev1.PodSpec, ctr corev1.Container, file string) (corev1.Volume, string) {
	t.Helper()
	for _, m := range ctr.VolumeMounts {
		if path.Dir(file) == m.MountPath {
			require.True(t, m.ReadOnly, "%s is mounted read-only", m.MountPath)
			return volume(t, spec, m.Name), path.Base(file)
		}
	}
	require.Failf(t, "not mounted", "no volume is mounted at %s", path.Dir(file))
	return corev1.Volume{}, ""
}

// TestMutualTLSAndPolicy: every service serves mutual TLS with the
// certificate of its own Secret, calls its peers over TLS with it, and
// enforces the policy of deploy/policy through a ConfigMap that carries the
// same document.
func TestMutualTLSAndPolicy(t *testing.T) {
	for _, v := range variants(t) {
		t.Run(v.name, func(t *testing.T) { checkMutualTLSAndPolicy(t, v.m, v.components) })
	}
}

// checkMutualTLSAndPolicy checks the TLS and policy of every component's
// Deployment in m.
func checkMutualTLSAndPolicy(t *testing.T, m manifests, components []component) {
	for _, c := range components {
		t.Run(c.name, func(t *testing.T) {
			name := "plexus-" + c.name
			d := typed[appsv1.Deployment](t, m, "Deployment", name)
			spec := d.Spec.Template.Spec
			ctr := spec.Containers[0]
			env := func(key string) string {
				v, ok := envValue(ctr, key)
				require.True(t, ok, "%s is set", key)
				require.NotEmpty(t, v, key)
				return v
			}

			secret := name + "-tls"
			for key, want := range map[string]string{
				"PLEXUS_TLS_CERT": "tls.crt", "PLEXUS_TLS_KEY": "tls.key", "PLEXUS_TLS_CLIENT_CA": "ca.crt",
			} {
				vol, file := mountOf(t, spec, ctr, env(key))
				require.NotNil(t, vol.Secret, "%s is on a Secret", key)
				require.Equal(t, secret, vol.Secret.SecretName)
				require.Equal(t, want, file, "%s is the Secret's key %s, as `plexusctl certs` names it", key, want)
				require.NotNil(t, vol.Secret.DefaultMode)
				require.Equal(t, int32(0o440), *vol.Secret.DefaultMode, "the key is readable by the pod's group only")
				require.NotNil(t, spec.SecurityContext.FSGroup, "the Secret's group is the pod's")
			}
			if c.callsPeers {
				require.Equal(t, env("PLEXUS_TLS_CLIENT_CA"), env("PLEXUS_PEER_CA"), "peers are verified against the same CA")
			} else {
				_, ok := envValue(ctr, "PLEXUS_PEER_CA")
				require.False(t, ok, "%s calls no peer", c.name)
			}

			vol, file := mountOf(t, spec, ctr, env("PLEXUS_AUTHZ_POLICY"))
			require.NotNil(t, vol.ConfigMap, "the policy is on a ConfigMap")
			cm := typed[corev1.ConfigMap](t, m, "ConfigMap", vol.ConfigMap.Name)
			require.Equal(t, name+"-policy", cm.Name)
			want, err := policy.File(c.name)
			require.NoError(t, err)
			require.Equal(t, string(want), cm.Data[file], "the ConfigMap carries deploy/policy/%s.json", c.name)
			p, err := auth.ParsePolicy([]byte(cm.Data[file]))
			require.NoError(t, err)
			require.Equal(t, c.name, p.Name())
		})
	}
}

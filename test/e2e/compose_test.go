package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/plexusnet/plexus/internal/testing/proctest"
)

// composeFile is the part of docker-compose.yaml this test reads.
type composeFile struct {
	Services map[string]struct {
		Build *struct {
			Target string `json:"target"`
		} `json:"build"`
		Environment map[string]string `json:"environment"`
		Command     []string          `json:"command"`
	} `json:"services"`
}

// TestComposeSetsOnlyRealFlags: every PLEXUS_* variable and every --flag
// argument that docker-compose.yaml gives a Plexus service is a flag of
// that service's binary (PLEXUS_FOO_BAR is --foo-bar), so a renamed flag
// cannot leave the compose file silently configuring nothing.
func TestComposeSetsOnlyRealFlags(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "docker-compose.yaml"))
	require.NoError(t, err)
	var f composeFile
	require.NoError(t, yaml.Unmarshal(raw, &f))
	flagRE := regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z0-9-]+)`)
	helps := map[string]map[string]bool{}
	checked := 0
	for name, svc := range f.Services {
		if svc.Build == nil || !plexusServices[svc.Build.Target] {
			continue // etcd, jaeger, the kube-apiserver and its one-shot setup
		}
		target := svc.Build.Target
		flags, ok := helps[target]
		if !ok {
			bin := proctest.Build(t, "./services/"+target)
			out, err := exec.Command(bin, "--help").CombinedOutput()
			require.NoError(t, err, "%s --help:\n%s", target, out)
			flags = map[string]bool{}
			for _, m := range flagRE.FindAllStringSubmatch(string(out), -1) {
				flags[m[1]] = true
			}
			require.Contains(t, flags, "grpc-addr", "the help of %s lists its flags", target)
			helps[target] = flags
		}
		require.NotEmpty(t, svc.Environment, "service %s", name)
		for key := range svc.Environment {
			flag, ok := strings.CutPrefix(key, "PLEXUS_")
			if !ok {
				require.True(t, strings.HasPrefix(key, "OTEL_"), "service %s sets %s, neither PLEXUS_* nor OTEL_*", name, key)
				continue
			}
			flag = strings.ToLower(strings.ReplaceAll(flag, "_", "-"))
			require.True(t, flags[flag], "service %s sets %s, but %s has no --%s", name, key, target, flag)
			checked++
		}
		for _, arg := range svc.Command {
			flag, ok := strings.CutPrefix(arg, "--")
			require.True(t, ok, "service %s: argument %q is not a --flag", name, arg)
			flag, _, _ = strings.Cut(flag, "=")
			require.True(t, flags[flag], "service %s passes %s, but %s has no --%s", name, arg, target, flag)
			checked++
		}
	}
	require.Greater(t, checked, 20)
}

// TestImagesOneScheme: the images are plexus/<target>:latest everywhere:
// the Dockerfile has the targets, `make images` tags them so, compose's
// services built from a target carry that name, and deploy/ runs them.
func TestImagesOneScheme(t *testing.T) {
	root := filepath.Join("..", "..")
	dockerfile, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	require.NoError(t, err)
	targets := []string{"allocator", "membership", "importer", "repair", "localkube"}
	for _, target := range targets {
		require.Regexp(t, `(?m)^FROM \S+ AS `+target+`$`, string(dockerfile))
	}

	cmd := exec.Command("make", "-n", "images")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), "for t in allocator membership importer repair localkube;")
	require.Contains(t, string(out), "--target $t -t plexus/$t:latest .")

	raw, err := os.ReadFile(filepath.Join(root, "docker-compose.yaml"))
	require.NoError(t, err)
	var f struct {
		Services map[string]struct {
			Image string `json:"image"`
			Build *struct {
				Target string `json:"target"`
			} `json:"build"`
		} `json:"services"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &f))
	built := 0
	for name, svc := range f.Services {
		if svc.Build == nil {
			continue
		}
		require.Equal(t, "plexus/"+svc.Build.Target+":latest", svc.Image, "compose service %s", name)
		built++
	}
	require.GreaterOrEqual(t, built, 9)

	for _, svc := range targets[:4] {
		manifest, err := os.ReadFile(filepath.Join(root, "deploy", map[string]string{
			"allocator": "10", "membership": "20", "importer": "30", "repair": "40"}[svc]+"-"+svc+".yaml"))
		require.NoError(t, err)
		require.Contains(t, string(manifest), "image: plexus/"+svc+":latest")
	}
}

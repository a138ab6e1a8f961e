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
	} `json:"services"`
}

// TestComposeSetsOnlyRealFlags: every PLEXUS_* variable that
// docker-compose.yaml gives a Plexus service is a flag of that service's
// binary (PLEXUS_FOO_BAR is --foo-bar), so a renamed flag cannot leave the
// compose file silently configuring nothing.
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
	}
	require.Greater(t, checked, 20)
}

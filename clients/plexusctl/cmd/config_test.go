package cmd

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
)

// TestMain keeps the developer's own config file and PLEXUS_* variables
// out of every test of the package.
func TestMain(m *testing.M) {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "PLEXUS") {
			os.Unsetenv(k)
		}
	}
	dir, err := os.MkdirTemp("", "plexusctl-test-")
	if err != nil {
		panic(err)
	}
	os.Setenv("XDG_CONFIG_HOME", dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// runPlexusctl runs plexusctl with args and returns what it printed.
func runPlexusctl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	root := NewRoot(&out)
	root.SetErr(io.Discard)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

// resolved runs a command that calls no service but goes through the
// root's resolution like every service command, and returns the value
// each connection setting ended up with.
func resolved(t *testing.T, args ...string) (map[string]string, error) {
	t.Helper()
	var got map[string]string
	root := NewRoot(io.Discard)
	root.AddCommand(&cobra.Command{Use: "probe", RunE: func(cmd *cobra.Command, _ []string) error {
		got = map[string]string{}
		for _, s := range connectionSettings() {
			got[s.flag] = cmd.Root().PersistentFlags().Lookup(s.flag).Value.String()
		}
		return nil
	}})
	root.SetArgs(append([]string{"probe"}, args...))
	return got, root.Execute()
}

func putFile(t *testing.T, path, content string) string {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o700))
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

const precedenceConfig = `current-context: ctx
contexts:
  - name: ctx
    allocator: ctx-allocator:7401
    membership: ctx-membership:7402
    tls:
      ca: pki/ca.pem
    token-file: token
    timeout: 30s
  - name: other
    importer: other-importer:7403
`

func TestConnectionPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := putFile(t, filepath.Join(dir, "config.yaml"), precedenceConfig)
	putFile(t, filepath.Join(dir, "token"), "ctx-token\n")
	empty := putFile(t, filepath.Join(dir, "empty.yaml"), "contexts: []\n")
	xdg := t.TempDir()
	putFile(t, filepath.Join(xdg, "plexus", "config.yaml"), precedenceConfig)
	putFile(t, filepath.Join(xdg, "plexus", "token"), "xdg-token")

	defaults := map[string]string{
		"allocator-addr": "127.0.0.1:7401", "membership-addr": "127.0.0.1:7402",
		"importer-addr": "127.0.0.1:7403", "repair-addr": "127.0.0.1:7404",
		"token": "", "tls-ca": "", "tls-cert": "", "tls-key": "", "timeout": "10s",
	}
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want map[string]string // differences from defaults
	}{
		{name: "built-in defaults without a config file"},
		{
			name: "current context", args: []string{"--config", file},
			want: map[string]string{"allocator-addr": "ctx-allocator:7401", "membership-addr": "ctx-membership:7402",
				"token": "ctx-token", "tls-ca": filepath.Join(dir, "pki", "ca.pem"), "timeout": "30s"},
		},
		{
			name: "environment beats context", args: []string{"--config", file},
			env: map[string]string{"PLEXUS_ALLOCATOR_ADDR": "env-allocator:1", "PLEXUS_TOKEN": "env-token"},
			want: map[string]string{"allocator-addr": "env-allocator:1", "membership-addr": "ctx-membership:7402",
				"token": "env-token", "tls-ca": filepath.Join(dir, "pki", "ca.pem"), "timeout": "30s"},
		},
		{
			name: "an empty environment variable gives nothing", args: []string{"--config", file},
			env: map[string]string{"PLEXUS_ALLOCATOR_ADDR": ""},
			want: map[string]string{"allocator-addr": "ctx-allocator:7401", "membership-addr": "ctx-membership:7402",
				"token": "ctx-token", "tls-ca": filepath.Join(dir, "pki", "ca.pem"), "timeout": "30s"},
		},
		{
			name: "flag beats environment and context",
			args: []string{"--config", file, "--allocator-addr", "flag-allocator:1", "--token", "flag-token",
				"--tls-ca", "/flag/ca.pem", "--timeout", "3s"},
			env: map[string]string{"PLEXUS_ALLOCATOR_ADDR": "env-allocator:1", "PLEXUS_TOKEN": "env-token"},
			want: map[string]string{"allocator-addr": "flag-allocator:1", "membership-addr": "ctx-membership:7402",
				"token": "flag-token", "tls-ca": "/flag/ca.pem", "timeout": "3s"},
		},
		{
			name: "flag given its default value still wins",
			args: []string{"--config", file, "--allocator-addr", "127.0.0.1:7401"},
			want: map[string]string{"membership-addr": "ctx-membership:7402",
				"token": "ctx-token", "tls-ca": filepath.Join(dir, "pki", "ca.pem"), "timeout": "30s"},
		},
		{
			name: "--context beats current-context", args: []string{"--config", file, "--context", "other"},
			want: map[string]string{"importer-addr": "other-importer:7403"},
		},
		{
			name: "PLEXUSCONFIG names the file", env: map[string]string{configEnv: file},
			want: map[string]string{"allocator-addr": "ctx-allocator:7401", "membership-addr": "ctx-membership:7402",
				"token": "ctx-token", "tls-ca": filepath.Join(dir, "pki", "ca.pem"), "timeout": "30s"},
		},
		{
			name: "--config beats PLEXUSCONFIG", env: map[string]string{configEnv: file}, args: []string{"--config", empty},
		},
		{
			name: "XDG_CONFIG_HOME holds the default file", env: map[string]string{"XDG_CONFIG_HOME": xdg},
			want: map[string]string{"allocator-addr": "ctx-allocator:7401", "membership-addr": "ctx-membership:7402",
				"token": "xdg-token", "tls-ca": filepath.Join(xdg, "plexus", "pki", "ca.pem"), "timeout": "30s"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			got, err := resolved(t, tc.args...)
			require.NoError(t, err)
			want := map[string]string{}
			for k, v := range defaults {
				want[k] = v
			}
			for k, v := range tc.want {
				want[k] = v
			}
			require.Equal(t, want, got)
		})
	}
}

func TestConfigSetUseDelete(t *testing.T) {
	cwd := t.TempDir()
	t.Chdir(cwd)
	dir := filepath.Join(t.TempDir(), "fresh", "plexus") // does not exist yet
	file := filepath.Join(dir, "config.yaml")
	ctl := func(args ...string) (string, error) {
		return runPlexusctl(t, append([]string{"--config", file}, args...)...)
	}

	out, err := ctl("config", "set-context", "lab", "--allocator", "a:1", "--membership", "m:2",
		"--tls-ca", "ca.pem", "--tls-cert", "/pki/client.pem", "--tls-key", "/pki/client-key.pem",
		"--token-file", "token", "--timeout", "5s")
	require.NoError(t, err)
	require.Contains(t, out, `Context "lab" created`)
	info, err := os.Stat(dir)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), info.Mode().Perm())
	info, err = os.Stat(file)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), info.Mode().Perm())

	// Only the fields given change; an empty value clears one.
	out, err = ctl("config", "set-context", "lab", "--repair", "r:4", "--tls-cert", "", "--tls-key", "")
	require.NoError(t, err)
	require.Contains(t, out, `Context "lab" modified`)
	_, err = ctl("config", "set-context", "prod", "--allocator", "p:1")
	require.NoError(t, err)

	_, err = ctl("config", "current-context")
	require.ErrorContains(t, err, "current-context is not set")
	_, err = ctl("config", "use-context", "staging")
	require.ErrorContains(t, err, `no context "staging"`)
	require.ErrorContains(t, err, "known contexts: lab, prod")
	_, err = ctl("config", "use-context", "prod")
	require.NoError(t, err)
	out, err = ctl("config", "current-context")
	require.NoError(t, err)
	require.Equal(t, "prod\n", out)

	out, err = ctl("config", "get-contexts")
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3, out)
	require.Equal(t, []string{"CURRENT", "NAME", "ALLOCATOR", "MEMBERSHIP", "IMPORTER", "REPAIR", "TLS", "TOKEN"}, strings.Fields(lines[0]))
	require.Equal(t, []string{"lab", "a:1", "m:2", "-", "r:4", "yes", "file"}, strings.Fields(lines[1]))
	require.Equal(t, []string{"*", "prod", "p:1", "-", "-", "-", "-", "-"}, strings.Fields(lines[2]))

	out, err = ctl("config", "view", "-o", "json")
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &doc), out)
	require.Equal(t, map[string]any{
		"current-context": "prod",
		"contexts": []any{
			map[string]any{"name": "lab", "allocator": "a:1", "membership": "m:2", "repair": "r:4",
				// Relative paths on the command line are the working directory's.
				"tls":        map[string]any{"ca": filepath.Join(cwd, "ca.pem")},
				"token-file": filepath.Join(cwd, "token"), "timeout": "5s"},
			map[string]any{"name": "prod", "allocator": "p:1"},
		},
	}, doc)
	out, err = ctl("config", "view")
	require.NoError(t, err)
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	require.Equal(t, string(b), out)

	_, err = ctl("config", "delete-context", "prod")
	require.NoError(t, err)
	_, err = ctl("config", "current-context")
	require.ErrorContains(t, err, "current-context is not set")
	_, err = ctl("config", "delete-context", "prod")
	require.ErrorContains(t, err, `no context "prod"`)
	require.ErrorContains(t, err, "known contexts: lab")
	out, err = ctl("config", "get-contexts", "-o", "yaml")
	require.NoError(t, err)
	require.Contains(t, out, "name: lab")
	require.NotContains(t, out, "prod")

	// Every write went through a temporary file renamed over the config.
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1)
	require.Equal(t, "config.yaml", entries[0].Name())
}

func TestConfigRelativePaths(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "conf")
	abs := filepath.Join(t.TempDir(), "key.pem")
	putFile(t, filepath.Join(dir, "config.yaml"), `current-context: lab
contexts:
  - name: lab
    tls:
      ca: pki/ca.pem
      cert: ../shared/client.pem
      key: `+abs+`
    token-file: secrets/token
`)
	putFile(t, filepath.Join(dir, "secrets", "token"), "  lab-token \n")

	// Run from elsewhere: the paths are the config file's directory's,
	// not the working directory's.
	t.Chdir(t.TempDir())
	got, err := resolved(t, "--config", filepath.Join(dir, "config.yaml"))
	require.NoError(t, err)
	require.Equal(t, filepath.Join(dir, "pki", "ca.pem"), got["tls-ca"])
	require.Equal(t, filepath.Join(base, "shared", "client.pem"), got["tls-cert"])
	require.Equal(t, abs, got["tls-key"])
	require.Equal(t, "lab-token", got["token"])

	// A relative --config is the working directory's, and so are the
	// paths resolved against it.
	t.Chdir(base)
	got, err = resolved(t, "--config", filepath.Join("conf", "config.yaml"))
	require.NoError(t, err)
	require.Equal(t, filepath.Join("conf", "pki", "ca.pem"), got["tls-ca"])
	require.Equal(t, "lab-token", got["token"])
}

func TestConfigBadFile(t *testing.T) {
	tests := []struct {
		name, content string
		args          []string
		want          []string
	}{
		{
			name:    "not YAML",
			content: "current-context: a\ncontexts:\n  - name: a\n    allocator: \"127.0.0.1:7401\n",
			want:    []string{"line 4"},
		},
		{
			name:    "misspelt key",
			content: "contexts:\n  - name: a\n    allocater: 127.0.0.1:7401\n",
			want:    []string{"line 3: field allocater not found"},
		},
		{
			name:    "bad timeout",
			content: "contexts:\n  - name: a\n    timeout: fast\n",
			want:    []string{"line 3:", "fast"},
		},
		{
			name:    "contexts not a list",
			content: "current-context: a\ncontexts: a\n",
			want:    []string{"line 2:", "cannot unmarshal"},
		},
		{
			name:    "context without a name",
			content: "contexts:\n  - name: a\n  - allocator: x:1\n",
			want:    []string{"context 2 has no name"},
		},
		{
			name:    "two contexts of one name",
			content: "contexts:\n  - name: a\n  - name: a\n",
			want:    []string{`context "a" appears more than once`},
		},
		{
			name:    "unknown current-context",
			content: "current-context: gone\ncontexts:\n  - name: a\n  - name: b\n",
			want:    []string{`current-context: no context "gone"`, "known contexts: a, b"},
		},
		{
			name:    "unknown --context",
			content: "contexts:\n  - name: a\n  - name: b\n",
			args:    []string{"--context", "c"},
			want:    []string{`no context "c"`, "known contexts: a, b"},
		},
		{
			name:    "--context without contexts",
			content: "",
			args:    []string{"--context", "c"},
			want:    []string{`no context "c"`, "has no contexts"},
		},
		{
			name:    "token file missing",
			content: "current-context: a\ncontexts:\n  - name: a\n    token-file: nothing-here\n",
			want:    []string{`context "a" of config file`, "read token-file", "nothing-here"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			file := putFile(t, filepath.Join(t.TempDir(), "config.yaml"), tc.content)
			_, err := resolved(t, append([]string{"--config", file}, tc.args...)...)
			require.Error(t, err)
			require.ErrorContains(t, err, file)
			for _, w := range tc.want {
				require.ErrorContains(t, err, w)
			}
		})
	}

	t.Run("missing --config file", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "config.yaml")
		_, err := resolved(t, "--config", file)
		require.ErrorContains(t, err, "config file "+file+" does not exist")
	})

	t.Run("the config commands mend a bad current-context", func(t *testing.T) {
		file := putFile(t, filepath.Join(t.TempDir(), "config.yaml"), "current-context: gone\ncontexts:\n  - name: a\n")
		_, err := runPlexusctl(t, "--config", file, "config", "use-context", "a")
		require.NoError(t, err)
		_, err = resolved(t, "--config", file)
		require.NoError(t, err)
	})
}

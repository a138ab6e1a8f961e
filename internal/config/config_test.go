package config_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/internal/config"
)

func envMap(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func parse(t *testing.T, svc config.Service, args []string, env map[string]string) (*config.Common, error) {
	t.Helper()
	c := config.New(svc)
	fs := pflag.NewFlagSet(svc.Name, pflag.ContinueOnError)
	c.AddFlags(fs)
	require.NoError(t, fs.Parse(args))
	if err := config.ApplyEnv(fs, envMap(env)); err != nil {
		return c, err
	}
	return c, c.Validate()
}

func TestServiceDefaults(t *testing.T) {
	tests := []struct {
		svc            config.Service
		grpc, http     string
		allocatorAddr  string
		callsAllocator bool
	}{
		{config.Allocator, "127.0.0.1:7401", "127.0.0.1:9401", "", false},
		{config.Membership, "127.0.0.1:7402", "127.0.0.1:9402", "127.0.0.1:7401", true},
		{config.Importer, "127.0.0.1:7403", "127.0.0.1:9403", "127.0.0.1:7401", true},
		{config.Repair, "127.0.0.1:7404", "127.0.0.1:9404", "127.0.0.1:7401", true},
	}
	for _, tc := range tests {
		t.Run(tc.svc.Name, func(t *testing.T) {
			c, err := parse(t, tc.svc, nil, nil)
			require.NoError(t, err)
			require.Equal(t, tc.grpc, c.GRPCAddr)
			require.Equal(t, tc.http, c.HTTPAddr)
			require.Equal(t, tc.allocatorAddr, c.AllocatorAddr)
			require.Equal(t, tc.callsAllocator, c.CallsAllocator())
			require.Equal(t, tc.svc.Name, c.Service)

			fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
			config.New(tc.svc).AddFlags(fs)
			require.Equal(t, tc.callsAllocator, fs.Lookup("allocator-addr") != nil)
		})
	}
}

func TestEnvAndFlags(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		env   map[string]string
		check func(t *testing.T, c *config.Common)
	}{
		{
			name: "env fills a flag",
			env:  map[string]string{"PLEXUS_GRPC_ADDR": "0.0.0.0:8000", "PLEXUS_DRAIN_TIMEOUT": "3s", "PLEXUS_RATE_LIMIT": "12.5"},
			check: func(t *testing.T, c *config.Common) {
				require.Equal(t, "0.0.0.0:8000", c.GRPCAddr)
				require.Equal(t, 3*time.Second, c.DrainTimeout)
				require.Equal(t, 12.5, c.RateLimit)
			},
		},
		{
			name: "flag wins over env",
			args: []string{"--grpc-addr=127.0.0.1:9000", "--log-format", "json"},
			env:  map[string]string{"PLEXUS_GRPC_ADDR": "0.0.0.0:8000", "PLEXUS_LOG_FORMAT": "text"},
			check: func(t *testing.T, c *config.Common) {
				require.Equal(t, "127.0.0.1:9000", c.GRPCAddr)
				require.Equal(t, "json", c.LogFormat)
			},
		},
		{
			name: "empty env counts as unset",
			env:  map[string]string{"PLEXUS_HTTP_ADDR": ""},
			check: func(t *testing.T, c *config.Common) {
				require.Equal(t, "127.0.0.1:9402", c.HTTPAddr)
			},
		},
		{
			name: "allocator address from env",
			env:  map[string]string{"PLEXUS_ALLOCATOR_ADDR": "dns:///allocator:7401"},
			check: func(t *testing.T, c *config.Common) {
				require.Equal(t, "dns:///allocator:7401", c.AllocatorAddr)
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parse(t, config.Membership, tc.args, tc.env)
			require.NoError(t, err)
			tc.check(t, c)
		})
	}
}

func TestEnvParseErrorNamesVariable(t *testing.T) {
	_, err := parse(t, config.Allocator, nil, map[string]string{"PLEXUS_MAX_INFLIGHT": "lots"})
	require.ErrorContains(t, err, "PLEXUS_MAX_INFLIGHT")
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string // "" means valid
	}{
		{name: "defaults", want: ""},
		{name: "json logs", args: []string{"--log-format=json", "--log-level=debug"}, want: ""},
		{name: "unknown log format", args: []string{"--log-format=yaml"}, want: "--log-format"},
		{name: "unknown log level", args: []string{"--log-level=chatty"}, want: "--log-level"},
		{name: "address without port", args: []string{"--grpc-addr=localhost"}, want: "--grpc-addr"},
		{name: "port out of range", args: []string{"--http-addr=:70000"}, want: "--http-addr"},
		{name: "cert without key", args: []string{"--tls-cert=c.pem"}, want: "--tls-key"},
		{name: "mtls without cert", args: []string{"--tls-client-ca=ca.pem"}, want: "mutual TLS"},
		{name: "negative rate", args: []string{"--rate-limit=-1"}, want: "--rate-limit"},
		{name: "rate not a number", args: []string{"--rate-limit=nan"}, want: "--rate-limit"},
		{name: "infinite rate", args: []string{"--rate-limit=+Inf"}, want: "--rate-limit"},
		{name: "zero drain timeout", args: []string{"--drain-timeout=0s"}, want: "--drain-timeout"},
		{name: "zero message size", args: []string{"--max-recv-msg-size=0"}, want: "--max-recv-msg-size"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parse(t, config.Repair, tc.args, nil)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	_, err := parse(t, config.Repair, []string{"--log-format=yaml", "--rate-limit=-1"}, nil)
	require.ErrorContains(t, err, "--log-format")
	require.ErrorContains(t, err, "--rate-limit")
}

func TestEnvName(t *testing.T) {
	require.Equal(t, "PLEXUS_GRPC_ADDR", config.EnvName("grpc-addr"))
	require.Equal(t, "PLEXUS_TLS_CLIENT_CA", config.EnvName("tls-client-ca"))
}

// TestBindCobra runs a real cobra command: --help documents every flag with
// its variable, and the environment reaches the command before it runs.
func TestBindCobra(t *testing.T) {
	newCmd := func(ran *bool, cfg *config.Common) *cobra.Command {
		cmd := &cobra.Command{Use: "importer", SilenceUsage: true, SilenceErrors: true,
			RunE: func(*cobra.Command, []string) error { *ran = true; return nil }}
		cfg.AddFlags(cmd.Flags())
		cmd.Flags().Int("slice-size", 100, "endpoints per slice")
		config.Bind(cmd, cfg.Validate)
		return cmd
	}

	t.Run("help", func(t *testing.T) {
		var ran bool
		cmd := newCmd(&ran, config.New(config.Importer))
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetArgs([]string{"--help"})
		require.NoError(t, cmd.Execute())
		require.False(t, ran)
		help := out.String()
		for _, flag := range []string{"grpc-addr", "http-addr", "kubeconfig", "cluster-name", "allocator-addr",
			"log-level", "log-format", "tls-cert", "tls-key", "tls-client-ca", "authz-policy", "auth-tokens",
			"max-recv-msg-size", "max-concurrent-streams", "rate-limit", "max-inflight", "drain-timeout", "slice-size"} {
			require.Contains(t, help, "--"+flag, flag)
			require.Contains(t, help, config.EnvName(flag), flag)
		}
	})

	t.Run("env reaches the command", func(t *testing.T) {
		t.Setenv("PLEXUS_CLUSTER_NAME", "east")
		t.Setenv("PLEXUS_SLICE_SIZE", "50")
		var ran bool
		cfg := config.New(config.Importer)
		cmd := newCmd(&ran, cfg)
		cmd.SetArgs(nil)
		require.NoError(t, cmd.Execute())
		require.True(t, ran)
		require.Equal(t, "east", cfg.ClusterName)
		n, err := cmd.Flags().GetInt("slice-size")
		require.NoError(t, err)
		require.Equal(t, 50, n)
	})

	t.Run("invalid env stops the command", func(t *testing.T) {
		t.Setenv("PLEXUS_LOG_FORMAT", "xml")
		var ran bool
		cmd := newCmd(&ran, config.New(config.Importer))
		cmd.SetArgs(nil)
		err := cmd.Execute()
		require.ErrorContains(t, err, "--log-format")
		require.False(t, ran)
		require.True(t, strings.Contains(err.Error(), "xml"))
	})
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	workloadv1alpha1 "github.com/plexusnet/plexus/api/workload/v1alpha1"
	"github.com/plexusnet/plexus/internal/testing/kubetest"
)

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    []string
		wantErr string
	}{
		{name: "default", want: []string{"a"}},
		{name: "two", args: []string{"--clusters", "east, west-1"}, want: []string{"east", "west-1"}},
		{name: "duplicate", args: []string{"--clusters", "a,a"}, wantErr: "named twice"},
		{name: "not a label", args: []string{"--clusters", "A_b"}, wantErr: "not a DNS label"},
		{name: "empty name", args: []string{"--clusters", "a,"}, wantErr: "not a DNS label"},
		{name: "stray argument", args: []string{"a"}, wantErr: "unexpected arguments"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseFlags(tc.args)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, o.clusters)
		})
	}
}

func TestEnvLinesQuote(t *testing.T) {
	require.Equal(t, `'it'\''s'`, shellQuote("it's"))
	require.Equal(t, "EAST_1", envName("east-1"))
}

// TestRun starts two clusters the way the demo does, uses them through the
// written kubeconfigs, and checks that a stop leaves nothing listening.
func TestRun(t *testing.T) {
	kubetest.RequireBinaries(t)
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout bytes.Buffer
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		done <- run(ctx, []string{"--clusters", "a,b", "--dir", dir}, &stdout, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()

	envPath := filepath.Join(dir, "env")
	deadline := time.After(2 * kubetest.DefaultStartTimeout)
	for ready := false; !ready; {
		select {
		case err := <-done:
			t.Fatalf("run ended before it was ready: %v", err)
		case <-deadline:
			t.Fatal("not ready in time")
		case <-time.After(50 * time.Millisecond):
			_, err := os.Stat(envPath)
			ready = err == nil
		}
	}
	t.Logf("two clusters with CRDs ready after %s", time.Since(start).Round(time.Millisecond))

	data, err := os.ReadFile(envPath)
	require.NoError(t, err)
	env := parseEnv(t, string(data))
	require.Equal(t, dir, env["LOCALKUBE_DIR"])
	require.Contains(t, env, "ETCD_ENDPOINT")

	var listening []string
	for name, wantServiceIP := range map[string]string{"A": "10.96.0.1", "B": "10.97.0.1"} {
		path := env["KUBECONFIG_"+name]
		require.FileExists(t, path)
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		require.NoError(t, err)
		client, err := kubernetes.NewForConfig(cfg)
		require.NoError(t, err)
		svc, err := client.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, wantServiceIP, svc.Spec.ClusterIP, "each cluster has its own Service range")
		_, err = client.Discovery().ServerResourcesForGroupVersion(workloadv1alpha1.SchemeGroupVersion.String())
		require.NoError(t, err, "CRDs are installed")
		u, err := url.Parse(cfg.Host)
		require.NoError(t, err)
		listening = append(listening, u.Host)
	}
	etcdURL, err := url.Parse(env["ETCD_ENDPOINT"])
	require.NoError(t, err)
	listening = append(listening, etcdURL.Host)

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(2 * kubetest.DefaultStopGrace):
		t.Fatal("run did not stop")
	}
	for _, addr := range listening {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = conn.Close()
		}
		require.Error(t, err, "%s still accepts connections after the stop", addr)
	}
	require.Equal(t, string(data), stdout.String(), "stdout carries the same lines as the env file")
}

func parseEnv(t *testing.T, data string) map[string]string {
	t.Helper()
	env := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(data))
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), "=")
		require.True(t, ok, sc.Text())
		require.True(t, strings.HasPrefix(value, "'") && strings.HasSuffix(value, "'"), value)
		env[key] = strings.ReplaceAll(value[1:len(value)-1], `'\''`, "'")
	}
	return env
}

// TestHelp: --help prints the usage with the pki and crds subcommands and
// is no failure.
func TestHelp(t *testing.T) {
	var out bytes.Buffer
	_, err := parseFlagsTo(&out, []string{"--help"})
	require.ErrorIs(t, err, flag.ErrHelp)
	require.Contains(t, out.String(), "localkube pki")
	require.Contains(t, out.String(), "localkube crds")
	require.Contains(t, out.String(), "-clusters")
}

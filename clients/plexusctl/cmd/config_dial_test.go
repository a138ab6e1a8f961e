package cmd

import (
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/internal/apierr"
	"github.com/plexusnet/plexus/internal/auth"
	"github.com/plexusnet/plexus/internal/config"
	"github.com/plexusnet/plexus/internal/server"
	"github.com/plexusnet/plexus/internal/testing/servertest"
	"github.com/plexusnet/plexus/internal/testing/testcerts"
	"github.com/plexusnet/plexus/services/allocator/allocation"
	allocserver "github.com/plexusnet/plexus/services/allocator/server"
	"github.com/plexusnet/plexus/services/allocator/store/memory"
)

// TestContextDialsServer runs commands against a real allocator that
// demands mutual TLS and knows one bearer token, with nothing on the
// command line but the context: its addresses, its TLS files (relative to
// the config file) and its token file are what reach the server.
func TestContextDialsServer(t *testing.T) {
	ca := testcerts.NewCA(t, "plexus")
	clientCert, clientKey := ca.Issue("client", testcerts.Leaf{CommonName: "operator"})

	cfg := config.New(config.Allocator)
	cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.TLSCert, cfg.TLSKey = ca.Issue("server", testcerts.Loopback("allocator"))
	cfg.TLSClientCA = ca.File
	cfg.AuthTokens = putFile(t, filepath.Join(t.TempDir(), "tokens"), "good-token,admin\n")
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := server.New(*cfg, "allocator", server.WithLogger(logger), server.WithoutSignalHandling())
	require.NoError(t, err)
	svc, err := allocation.New(t.Context(), memory.New(), allocation.WithLogger(logger))
	require.NoError(t, err)
	allocserver.New(svc, nil).Register(srv.GRPC())
	for _, name := range serviceNames {
		srv.SetServing(name, true) // status asks after all four
	}
	servertest.Serve(t, srv)

	// The config directory carries its own copies of the TLS material,
	// named relatively, as one would keep it.
	dir := t.TempDir()
	for src, dst := range map[string]string{ca.File: "pki/ca.pem", clientCert: "pki/client.pem", clientKey: "pki/client-key.pem"} {
		b, err := os.ReadFile(src)
		require.NoError(t, err)
		putFile(t, filepath.Join(dir, dst), string(b))
	}
	putFile(t, filepath.Join(dir, "token"), "good-token\n")
	putFile(t, filepath.Join(dir, "bad-token"), "bad-token\n")
	addr := srv.GRPCAddr()
	file := putFile(t, filepath.Join(dir, "config.yaml"), `current-context: lab
contexts:
  - name: lab
    allocator: `+addr+`
    membership: `+addr+`
    importer: `+addr+`
    repair: `+addr+`
    tls: {ca: pki/ca.pem, cert: pki/client.pem, key: pki/client-key.pem}
    token-file: token
    timeout: 5s
  - name: plaintext
    allocator: `+addr+`
    membership: `+addr+`
    importer: `+addr+`
    repair: `+addr+`
  - name: wrong-token
    allocator: `+addr+`
    tls: {ca: pki/ca.pem, cert: pki/client.pem, key: pki/client-key.pem}
    token-file: bad-token
`)
	t.Setenv(configEnv, file)
	t.Chdir(t.TempDir()) // the relative paths must not be the working directory's

	var out string
	require.Eventually(t, func() bool { out, err = runPlexusctl(t, "status", "-o", "json"); return err == nil },
		10*time.Second, 50*time.Millisecond, "status through context lab: %v\n%s", err, out)
	var statuses []map[string]string
	require.NoError(t, json.Unmarshal([]byte(out), &statuses), out)
	require.Len(t, statuses, 4)
	for _, s := range statuses {
		require.Equal(t, addr, s["address"])
		require.Equal(t, "SERVING", s["status"])
	}

	_, err = runPlexusctl(t, "pool", "create", "vips", "--cidr", "10.112.0.0/16")
	require.NoError(t, err)
	out, err = runPlexusctl(t, "pool", "list", "-o", "json")
	require.NoError(t, err)
	require.Contains(t, out, "10.112.0.0/16")

	// Without the context's TLS material the server is not reached at all,
	// and status says that TLS is what failed.
	// (A deadline longer than the retries, which end in UNAVAILABLE.)
	out, err = runPlexusctl(t, "status", "--context", "plaintext", "--timeout", "8s")
	require.ErrorIs(t, err, errNotHealthy)
	require.Contains(t, out, "TLS_ERROR")
	require.Contains(t, out, "it likely requires TLS")

	// The token is the context's token file's: a wrong one is refused,
	// and the environment beats the context's.
	_, err = runPlexusctl(t, "pool", "list", "--context", "wrong-token")
	require.Equal(t, auth.ReasonInvalidToken, apierr.Reason(err), "%v", err)
	t.Setenv("PLEXUS_TOKEN", "good-token")
	_, err = runPlexusctl(t, "pool", "list", "--context", "wrong-token")
	require.NoError(t, err)

	// A flag beats the context: the same context with another address
	// reaches nothing.
	_, err = runPlexusctl(t, "pool", "list", "--allocator-addr", "127.0.0.1:1", "--timeout", "1s")
	require.Error(t, err)
}

package cmd

import (
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plexusnet/plexus/internal/config"
	"github.com/plexusnet/plexus/internal/server"
	"github.com/plexusnet/plexus/internal/testing/servertest"
	"github.com/plexusnet/plexus/internal/testing/testcerts"
	"github.com/plexusnet/plexus/services/allocator/allocation"
	allocserver "github.com/plexusnet/plexus/services/allocator/server"
	"github.com/plexusnet/plexus/services/allocator/store/memory"
)

// startAllocator serves an allocator on a loopback port, with mutual TLS
// under ca when ca is not nil, and returns its address.
func startAllocator(t *testing.T, ca *testcerts.CA) string {
	t.Helper()
	cfg := config.New(config.Allocator)
	cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	if ca != nil {
		cfg.TLSCert, cfg.TLSKey = ca.Issue("server", testcerts.Loopback("allocator"))
		cfg.TLSClientCA = ca.File
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := server.New(*cfg, "allocator", server.WithLogger(logger), server.WithoutSignalHandling())
	require.NoError(t, err)
	svc, err := allocation.New(t.Context(), memory.New(), allocation.WithLogger(logger))
	require.NoError(t, err)
	allocserver.New(svc, nil).Register(srv.GRPC())
	servertest.Serve(t, srv)
	return srv.GRPCAddr()
}

// TestTLSFailureIsNotADownServer: a call that reaches a running allocator
// but fails on TLS (no TLS where it is required, TLS where it is not, an
// untrusted server certificate, no client certificate) says what about TLS
// went wrong, never that the allocator may not be running, and keeps its
// UNAVAILABLE status; one to a closed port still says where it looked.
func TestTLSFailureIsNotADownServer(t *testing.T) {
	ca := testcerts.NewCA(t, "plexus")
	other := testcerts.NewCA(t, "other")
	cert, key := ca.Issue("client", testcerts.Leaf{CommonName: "operator"})
	mtls, plain := startAllocator(t, ca), startAllocator(t, nil)
	clientTLS := []string{"--tls-ca", ca.File, "--tls-cert", cert, "--tls-key", key}

	tests := []struct {
		name string
		args []string
		want string
	}{
		{name: "plaintext to a TLS allocator", args: []string{"--allocator-addr", mtls},
			want: "it likely requires TLS; give --tls-ca, --tls-cert and --tls-key"},
		{name: "TLS to a plaintext allocator", args: append([]string{"--allocator-addr", plain}, clientTLS...),
			want: "it does not speak TLS"},
		{name: "a CA that did not issue the server's certificate",
			args: []string{"--allocator-addr", mtls, "--tls-ca", other.File, "--tls-cert", cert, "--tls-key", key},
			want: "its certificate was not accepted: check that --tls-ca is the CA that issued it"},
		{name: "no client certificate", args: []string{"--allocator-addr", mtls, "--tls-ca", ca.File},
			want: "it wants a client certificate its CA issued (--tls-cert and --tls-key"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runPlexusctl(t, append([]string{"pool", "list", "--timeout", "5s"}, tc.args...)...)
			require.Error(t, err)
			require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
			var te *tlsError
			require.True(t, errors.As(err, &te), "%v", err)
			msg := describe(err)
			require.Contains(t, msg, "cannot talk to the allocator at "+te.addr+": ")
			require.Contains(t, msg, tc.want)
			require.NotContains(t, msg, "is it running there?")
		})
	}

	// With the right material the same allocator answers.
	_, err := runPlexusctl(t, append([]string{"pool", "list", "--timeout", "5s", "--allocator-addr", mtls}, clientTLS...)...)
	require.NoError(t, err)
	// Nothing listening is not a TLS matter, with or without TLS.
	for _, args := range [][]string{{"--allocator-addr", "127.0.0.1:1"}, append([]string{"--allocator-addr", "127.0.0.1:1"}, clientTLS...)} {
		_, err = runPlexusctl(t, append([]string{"pool", "list", "--timeout", "2s"}, args...)...)
		require.False(t, errors.As(err, new(*tlsError)), "%v", err)
		require.Contains(t, describe(err), "is it running there?")
	}
}

// TestTLSHint: what a connection's failure says about TLS, from the
// messages grpc-go gives; anything else is not called a TLS failure.
func TestTLSHint(t *testing.T) {
	const (
		preface = `connection error: desc = "error reading server preface: EOF"`
		refused = `connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused"`
		pipe    = `connection error: desc = "write tcp 127.0.0.1:1->127.0.0.1:2: write: broken pipe"`
	)
	for _, tc := range []struct {
		msg string
		use tlsUse
		tls bool
	}{
		{msg: preface, use: noTLS, tls: true},
		{msg: `connection error: desc = "error reading server preface: read tcp 127.0.0.1:1->127.0.0.1:2: read: connection reset by peer"`, use: noTLS, tls: true},
		{msg: preface, use: tlsWithCert},
		{msg: preface, use: tlsWithoutCert, tls: true},
		{msg: pipe, use: tlsWithoutCert, tls: true},
		{msg: pipe, use: tlsWithCert},
		{msg: pipe, use: noTLS},
		{msg: refused, use: noTLS},
		{msg: refused, use: tlsWithoutCert},
		{msg: refused, use: tlsWithCert},
		{msg: `connection error: desc = "transport: authentication handshake failed: tls: first record does not look like a TLS handshake"`, use: tlsWithCert, tls: true},
		{msg: `connection error: desc = "transport: authentication handshake failed: tls: failed to verify certificate: x509: certificate is valid for a, not b"`, use: tlsWithCert, tls: true},
		{msg: `connection error: desc = "error reading server preface: remote error: tls: certificate required"`, use: tlsWithoutCert, tls: true},
		{msg: `connection error: desc = "transport: authentication handshake failed: tls: handshake failure"`, use: tlsWithCert, tls: true},
	} {
		require.Equal(t, tc.tls, tlsHint(tc.msg, tc.use) != "", "%q with TLS use %d", tc.msg, tc.use)
	}
}

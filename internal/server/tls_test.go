package server_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/plexusnet/plexus/internal/dial"
	"github.com/plexusnet/plexus/internal/testing/testcerts"
)

func TestMutualTLS(t *testing.T) {
	ca := testcerts.NewCA(t, "plexus")
	cfg := testConfig()
	cfg.TLSCert, cfg.TLSKey = ca.Issue("server", testcerts.Loopback("allocator"))
	cfg.TLSClientCA = ca.File
	r := start(t, cfg)

	repairCert, repairKey := ca.Issue("repair", testcerts.Leaf{CommonName: "repair"})
	spiffeCert, spiffeKey := ca.Issue("importer", testcerts.Leaf{CommonName: "importer-1", URIs: []string{"spiffe://plexus.dev/ns/plexus/sa/importer"}})
	rogueCert, rogueKey := testcerts.NewCA(t, "rogue").Issue("rogue", testcerts.Leaf{CommonName: "repair"})

	tests := []struct {
		name string
		opts []dial.Option
		code codes.Code
		user string
	}{
		{name: "no client certificate", opts: []dial.Option{dial.WithTLSFiles(ca.File, "", "")}, code: codes.Unavailable},
		{name: "certificate of another CA", opts: []dial.Option{dial.WithTLSFiles(ca.File, rogueCert, rogueKey)}, code: codes.Unavailable},
		{name: "plaintext", opts: []dial.Option{dial.WithInsecure()}, code: codes.Unavailable},
		{name: "common name", opts: []dial.Option{dial.WithTLSFiles(ca.File, repairCert, repairKey)}, user: "repair"},
		{name: "spiffe id", opts: []dial.Option{dial.WithTLSFiles(ca.File, spiffeCert, spiffeKey)}, user: "spiffe://plexus.dev/ns/plexus/sa/importer"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := connect(t, r.srv.GRPCAddr(), tc.opts...).UnaryCall(callCtx(t), body("hi"))
			require.Equal(t, tc.code, status.Code(err), "%v", err)
			require.Equal(t, tc.user, resp.GetUsername())
		})
	}
}

func TestServerTLSWithoutClientCertificates(t *testing.T) {
	ca := testcerts.NewCA(t, "plexus")
	cfg := testConfig()
	cfg.TLSCert, cfg.TLSKey = ca.Issue("server", testcerts.Loopback("allocator"))
	cfg.AuthTokens = writeFile(t, "tokens", "tok,membership\n")
	r := start(t, cfg)

	// TLS without a client certificate, identified by a bearer token.
	resp, err := connect(t, r.srv.GRPCAddr(), dial.WithTLSFiles(ca.File, "", ""), dial.WithBearerToken("tok")).
		UnaryCall(callCtx(t), body("hi"))
	require.NoError(t, err)
	require.Equal(t, "membership", resp.GetUsername())

	// A client that does not trust the server's CA gives up.
	other := testcerts.NewCA(t, "other")
	_, err = connect(t, r.srv.GRPCAddr(), dial.WithTLSFiles(other.File, "", "")).UnaryCall(callCtx(t), &testpb.SimpleRequest{})
	require.Equal(t, codes.Unavailable, status.Code(err))
}

package auth_test

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/metadata"

	"github.com/plexusnet/plexus/internal/auth"
)

const policyJSON = `{
  "name": "allocator",
  "deny_rules": [
    {"name": "no-release-for-importer",
     "source": {"principals": ["importer"]},
     "request": {"paths": ["/plexus.allocator.v1.AllocatorService/Release"]}}
  ],
  "allow_rules": [
    {"name": "services", "source": {"principals": ["importer", "repair", "spiffe://plexus.dev/*"]}},
    {"name": "anyone-reads", "request": {"paths": ["/plexus.allocator.v1.AllocatorService/Get*"]}},
    {"name": "authenticated-lists", "source": {"principals": ["*"]}, "request": {"paths": ["*/ListPools"]}},
    {"name": "debug-header", "source": {"principals": ["ops"]},
     "request": {"headers": [{"key": "X-Plexus-Debug", "values": ["on", "verbose*"]}]}}
  ]
}`

func TestPolicyDecide(t *testing.T) {
	p, err := auth.ParsePolicy([]byte(policyJSON))
	require.NoError(t, err)
	require.Equal(t, "allocator", p.Name())

	const svc = "/plexus.allocator.v1.AllocatorService/"
	tests := []struct {
		name      string
		principal string
		method    string
		md        metadata.MD
		allowed   bool
		rule      string
	}{
		{"deny rule wins", "importer", svc + "Release", nil, false, "no-release-for-importer"},
		{"allowed principal", "importer", svc + "Allocate", nil, true, "services"},
		{"other principal may release", "repair", svc + "Release", nil, true, "services"},
		{"prefix principal", "spiffe://plexus.dev/ns/a/sa/membership", svc + "Allocate", nil, true, "services"},
		{"prefix principal must match", "spiffe://evil.dev/x", svc + "Allocate", nil, false, ""},
		{"anonymous read through path prefix", "", svc + "GetPool", nil, true, "anyone-reads"},
		{"anonymous write denied", "", svc + "Allocate", nil, false, ""},
		{"star needs a principal", "", svc + "ListPools", nil, false, ""},
		{"star matches any principal", "someone", svc + "ListPools", nil, true, "authenticated-lists"},
		{"suffix path", "someone", "/other.Service/ListPools", nil, true, "authenticated-lists"},
		{"header exact", "ops", svc + "Allocate", metadata.Pairs("x-plexus-debug", "on"), true, "debug-header"},
		{"header prefix", "ops", svc + "Allocate", metadata.Pairs("x-plexus-debug", "verbose-2"), true, "debug-header"},
		{"header mismatch", "ops", svc + "Allocate", metadata.Pairs("x-plexus-debug", "off"), false, ""},
		{"header missing", "ops", svc + "Allocate", nil, false, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := p.Decide(auth.Request{Principal: tc.principal, Method: tc.method, Metadata: tc.md})
			require.Equal(t, tc.allowed, d.Allowed)
			require.Equal(t, tc.rule, d.Rule)
		})
	}
}

func TestParsePolicyErrors(t *testing.T) {
	tests := map[string]string{
		`{"allow_rules": [{"name": "a"}]}`:                           `"name"`,
		`{"name": "p"}`:                                              `"allow_rules"`,
		`{"name": "p", "allow_rules": [{}]}`:                         `"name" is missing`,
		`{"name": "p", "allow_rules": [{"name": "a", "sorce": {}}]}`: "unknown field",
		`{"name": "p", "allow_rules": [{"name": "a", "request": {"headers": [{"key": ":path", "values": ["x"]}]}}]}`:        "not supported",
		`{"name": "p", "allow_rules": [{"name": "a", "request": {"headers": [{"key": "grpc-timeout", "values": ["x"]}]}}]}`: "not supported",
		`{"name": "p", "allow_rules": [{"name": "a", "request": {"headers": [{"key": "x-a"}]}}]}`:                           `"values"`,
		`not json`: "parse policy",
	}
	for in, want := range tests {
		_, err := auth.ParsePolicy([]byte(in))
		require.ErrorContains(t, err, want, in)
	}
}

func TestTokens(t *testing.T) {
	tok, err := auth.ParseTokens(strings.NewReader("# service tokens\n\nabc123,repair\n  def456 , importer \n"))
	require.NoError(t, err)
	require.Equal(t, 2, tok.Len())
	p, ok := tok.Lookup("abc123")
	require.True(t, ok)
	require.Equal(t, "repair", p)
	p, ok = tok.Lookup("def456")
	require.True(t, ok)
	require.Equal(t, "importer", p)
	_, ok = tok.Lookup("abc12")
	require.False(t, ok)

	for in, want := range map[string]string{
		"justatoken\n":        "line 1",
		"a,x\n,y\n":           "line 2",
		"a,x\nb,y\na,z\n":     `already given to "x"`,
		"ok,p\n\n# c\ntok,\n": "line 4",
	} {
		_, err := auth.ParseTokens(strings.NewReader(in))
		require.ErrorContains(t, err, want, in)
	}
}

func TestCertPrincipal(t *testing.T) {
	spiffe, _ := url.Parse("spiffe://plexus.dev/repair")
	web, _ := url.Parse("https://example.com/x")
	require.Equal(t, "repair", auth.CertPrincipal(&x509.Certificate{Subject: pkix.Name{CommonName: "repair"}}))
	require.Equal(t, "spiffe://plexus.dev/repair", auth.CertPrincipal(&x509.Certificate{
		Subject: pkix.Name{CommonName: "ignored"}, URIs: []*url.URL{web, spiffe}}))
	require.Equal(t, "cn", auth.CertPrincipal(&x509.Certificate{Subject: pkix.Name{CommonName: "cn"}, URIs: []*url.URL{web}}))
}

func TestPrincipalContext(t *testing.T) {
	_, ok := auth.PrincipalFrom(context.Background())
	require.False(t, ok)
	p, ok := auth.PrincipalFrom(auth.WithPrincipal(context.Background(), "repair"))
	require.True(t, ok)
	require.Equal(t, "repair", p)
}

package pki

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestIssuedCertificatesChainToTheirCA(t *testing.T) {
	now := time.Now()
	ca, err := NewCA(pkix.Name{CommonName: "test-ca"}, now.Add(-time.Minute), now.Add(time.Hour))
	require.NoError(t, err)
	require.True(t, ca.Cert.IsCA)
	require.True(t, ca.Cert.MaxPathLenZero)
	other, err := NewCA(pkix.Name{CommonName: "other-ca"}, now.Add(-time.Minute), now.Add(time.Hour))
	require.NoError(t, err)

	id, _ := url.Parse("spiffe://plexus.local/allocator")
	certPEM, keyPEM, err := ca.Issue(Leaf{
		Subject:  pkix.Name{CommonName: "allocator", Organization: []string{"Plexus"}},
		DNSNames: []string{"localhost"},
		IPs:      []net.IP{net.IPv4(127, 0, 0, 1)},
		URIs:     []*url.URL{id},
		Usages:   []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}, now.Add(-time.Minute), now.Add(time.Hour))
	require.NoError(t, err)
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	require.NoError(t, err, "the key matches the certificate")
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	require.NoError(t, err)
	require.Equal(t, []*url.URL{id}, leaf.URIs)

	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		roots := x509.NewCertPool()
		roots.AddCert(ca.Cert)
		_, err = leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}, DNSName: "localhost"})
		require.NoError(t, err)
	}
	foreign := x509.NewCertPool()
	foreign.AddCert(other.Cert)
	_, err = leaf.Verify(x509.VerifyOptions{Roots: foreign})
	require.Error(t, err, "another CA does not vouch for it")

	// The default usage is client authentication only.
	clientPEM, _, err := ca.Issue(Leaf{Subject: pkix.Name{CommonName: "operator"}}, now, now.Add(time.Hour))
	require.NoError(t, err)
	block, _ := pem.Decode(clientPEM)
	require.NotNil(t, block)
	client, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	require.Equal(t, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, client.ExtKeyUsage)

	s1, err := newSerial()
	require.NoError(t, err)
	s2, err := newSerial()
	require.NoError(t, err)
	require.NotEqual(t, s1, s2)
}

// TestParseCA: a CA read back from its PEM files signs leaves that chain to
// it; a leaf, a foreign key or garbage is refused.
func TestParseCA(t *testing.T) {
	now := time.Now()
	ca, err := NewCA(pkix.Name{CommonName: "test-ca"}, now.Add(-time.Minute), now.Add(time.Hour))
	require.NoError(t, err)
	keyPEM, err := ca.KeyPEM()
	require.NoError(t, err)
	back, err := ParseCA(ca.CertPEM, keyPEM)
	require.NoError(t, err)
	require.Equal(t, ca.Cert.Raw, back.Cert.Raw)
	leafPEM, leafKey, err := back.Issue(Leaf{Subject: pkix.Name{CommonName: "x"}}, now.Add(-time.Minute), now.Add(time.Hour))
	require.NoError(t, err)
	block, _ := pem.Decode(leafPEM)
	leaf, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	require.NoError(t, leaf.CheckSignatureFrom(ca.Cert), "signed by the original CA")

	other, err := NewCA(pkix.Name{CommonName: "other-ca"}, now.Add(-time.Minute), now.Add(time.Hour))
	require.NoError(t, err)
	otherKey, err := other.KeyPEM()
	require.NoError(t, err)
	_, err = ParseCA(ca.CertPEM, otherKey)
	require.ErrorContains(t, err, "does not belong")
	_, err = ParseCA(leafPEM, leafKey)
	require.ErrorContains(t, err, "not a CA")
	_, err = ParseCA([]byte("junk"), keyPEM)
	require.Error(t, err)
	_, err = ParseCA(ca.CertPEM, nil)
	require.Error(t, err)
}

func FuzzParseCA(f *testing.F) {
	now := time.Now()
	ca, err := NewCA(pkix.Name{CommonName: "fuzz-ca"}, now.Add(-time.Minute), now.Add(time.Hour))
	require.NoError(f, err)
	keyPEM, err := ca.KeyPEM()
	require.NoError(f, err)
	f.Add(ca.CertPEM, keyPEM)
	f.Add([]byte("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n"), []byte{})
	f.Fuzz(func(t *testing.T, certPEM, keyPEM []byte) {
		got, err := ParseCA(certPEM, keyPEM)
		if err != nil {
			return
		}
		require.True(t, got.Cert.IsCA)
		require.True(t, got.Key.PublicKey.Equal(got.Cert.PublicKey))
	})
}

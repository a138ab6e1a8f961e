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

package tlsconf

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/internal/testing/testcerts"
)

func copyFile(t *testing.T, from, to string, mtime time.Time) {
	t.Helper()
	b, err := os.ReadFile(from)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(to, b, 0o600))
	require.NoError(t, os.Chtimes(to, mtime, mtime))
}

func commonName(t *testing.T, c *tls.Certificate) string {
	t.Helper()
	require.NotNil(t, c.Leaf)
	return c.Leaf.Subject.CommonName
}

// TestServerReloadsRotatedCertificate rotates the files under a running
// configuration, as cert-manager does, and checks the next handshake gets
// the new pair while a broken write keeps the old one.
func TestServerReloadsRotatedCertificate(t *testing.T) {
	old := recheckEvery
	recheckEvery = 0
	t.Cleanup(func() { recheckEvery = old })

	ca := testcerts.NewCA(t, "plexus")
	firstCert, firstKey := ca.Issue("first", testcerts.Loopback("first"))
	secondCert, secondKey := ca.Issue("second", testcerts.Loopback("second"))

	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	t0 := time.Now().Add(-time.Minute)
	copyFile(t, firstCert, certFile, t0)
	copyFile(t, firstKey, keyFile, t0)

	cfg, err := Server(certFile, keyFile, "")
	require.NoError(t, err)
	require.Equal(t, tls.NoClientCert, cfg.ClientAuth)
	c, err := cfg.GetCertificate(nil)
	require.NoError(t, err)
	require.Equal(t, "first", commonName(t, c))

	copyFile(t, secondCert, certFile, t0.Add(time.Second))
	copyFile(t, secondKey, keyFile, t0.Add(time.Second))
	c, err = cfg.GetCertificate(nil)
	require.NoError(t, err)
	require.Equal(t, "second", commonName(t, c))

	require.NoError(t, os.WriteFile(certFile, []byte("half written"), 0o600))
	c, err = cfg.GetCertificate(nil)
	require.NoError(t, err)
	require.Equal(t, "second", commonName(t, c), "a broken file keeps the last good pair")
}

func TestServerMutualTLS(t *testing.T) {
	ca := testcerts.NewCA(t, "plexus")
	cert, key := ca.Issue("server", testcerts.Loopback("server"))
	cfg, err := Server(cert, key, ca.File)
	require.NoError(t, err)
	require.Equal(t, tls.RequireAndVerifyClientCert, cfg.ClientAuth)
	require.NotNil(t, cfg.ClientCAs)
}

func TestErrors(t *testing.T) {
	ca := testcerts.NewCA(t, "plexus")
	cert, key := ca.Issue("server", testcerts.Loopback("server"))
	notPEM := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("nothing here"), 0o600))

	_, err := Server(cert, filepath.Join(t.TempDir(), "missing"), "")
	require.ErrorContains(t, err, "key")
	_, err = Server(cert, key, notPEM)
	require.ErrorContains(t, err, "no PEM certificate")
	_, err = Server(cert, cert, "") // a certificate is not a key
	require.ErrorContains(t, err, "load key pair")
	_, err = Client("", cert, "")
	require.ErrorContains(t, err, "both or neither")
	_, err = Client(filepath.Join(t.TempDir(), "missing"), "", "")
	require.ErrorContains(t, err, "read CA bundle")

	c, err := Client(ca.File, cert, key)
	require.NoError(t, err)
	require.NotNil(t, c.RootCAs)
	got, err := c.GetClientCertificate(nil)
	require.NoError(t, err)
	require.Equal(t, "server", commonName(t, got))
}

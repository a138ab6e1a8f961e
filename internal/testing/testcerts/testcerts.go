// Package testcerts issues throwaway certificates for tests of TLS and
// mutual TLS: a CA and leaf certificates written as PEM files into a test's
// temporary directory, valid for an hour.
package testcerts

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/plexusnet/plexus/internal/pki"
)

// CA is a certificate authority of one test.
type CA struct {
	// File is the PEM file of the CA certificate, for --tls-client-ca or
	// --peer-ca.
	File string

	t   testing.TB
	dir string
	ca  *pki.CA
}

// Leaf describes a certificate to issue. A server certificate needs
// IPs or DNSNames; a client is named by CommonName or a SPIFFE URI.
type Leaf struct {
	CommonName string
	DNSNames   []string
	IPs        []net.IP
	URIs       []string
	// Server marks a server certificate; otherwise it is a client one.
	Server bool
}

// NewCA creates a CA named name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	ca, err := pki.NewCA(pkix.Name{CommonName: name}, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	c := &CA{t: t, dir: t.TempDir(), ca: ca}
	c.File = c.write(name+"-ca.pem", ca.CertPEM)
	return c
}

// Issue signs a certificate for leaf and returns its certificate and key
// files, named after name.
func (ca *CA) Issue(name string, leaf Leaf) (certFile, keyFile string) {
	ca.t.Helper()
	l := pki.Leaf{Subject: pkix.Name{CommonName: leaf.CommonName}, DNSNames: leaf.DNSNames, IPs: leaf.IPs}
	if leaf.Server {
		l.Usages = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	for _, u := range leaf.URIs {
		parsed, err := url.Parse(u)
		if err != nil {
			ca.t.Fatalf("URI SAN %q: %v", u, err)
		}
		l.URIs = append(l.URIs, parsed)
	}
	certPEM, keyPEM, err := ca.ca.Issue(l, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	if err != nil {
		ca.t.Fatalf("issue %s: %v", name, err)
	}
	return ca.write(name+".pem", certPEM), ca.write(name+"-key.pem", keyPEM)
}

// Loopback describes a server certificate for 127.0.0.1, ::1 and localhost.
func Loopback(commonName string) Leaf {
	return Leaf{
		CommonName: commonName,
		DNSNames:   []string{"localhost"},
		IPs:        []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		Server:     true,
	}
}

func (ca *CA) write(name string, data []byte) string {
	p := filepath.Join(ca.dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		ca.t.Fatalf("write %s: %v", p, err)
	}
	return p
}

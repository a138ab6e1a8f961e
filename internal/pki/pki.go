// Package pki makes the X.509 material Plexus issues itself: a CA and the
// certificates it signs, on ECDSA P-256 keys (generated in microseconds,
// where RSA keys would slow every test cluster down), PEM-encoded. The
// operator's certificates (plexusctl certs), the test control plane's
// (kubetest) and the throwaway ones of TLS tests (testcerts) all come from
// here; what differs between them is only names and lifetimes.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"time"
)

// CA is a certificate authority that signs leaves only.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// CertPEM is Cert, PEM-encoded.
	CertPEM []byte
}

// NewCA creates a self-signed CA valid from notBefore to notAfter.
func NewCA(subject pkix.Name, notBefore, notAfter time.Time) (*CA, error) {
	key, err := NewKey()
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               subject,
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true, // signs only leaves
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	return &CA{Cert: cert, Key: key, CertPEM: Encode("CERTIFICATE", der)}, nil
}

// KeyPEM is the CA's private key, PEM-encoded (PKCS #8).
func (ca *CA) KeyPEM() ([]byte, error) { return EncodeKey(ca.Key) }

// Leaf describes a certificate to sign. Usages defaults to client
// authentication.
type Leaf struct {
	Subject  pkix.Name
	DNSNames []string
	IPs      []net.IP
	URIs     []*url.URL
	Usages   []x509.ExtKeyUsage
}

// Issue signs a new key's certificate for l, valid from notBefore to
// notAfter, and returns both PEM-encoded.
func (ca *CA) Issue(l Leaf, notBefore, notAfter time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := NewKey()
	if err != nil {
		return nil, nil, fmt.Errorf("generate key for %s: %w", l.Subject.CommonName, err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	usages := l.Usages
	if len(usages) == 0 {
		usages = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      l.Subject,
		DNSNames:     l.DNSNames,
		IPAddresses:  l.IPs,
		URIs:         l.URIs,
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usages,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("sign certificate for %s: %w", l.Subject.CommonName, err)
	}
	keyPEM, err = EncodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return Encode("CERTIFICATE", der), keyPEM, nil
}

// NewKey generates an ECDSA P-256 key.
func NewKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

// EncodeKey PEM-encodes key as PKCS #8.
func EncodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode private key: %w", err)
	}
	return Encode("PRIVATE KEY", der), nil
}

// Encode PEM-encodes der as a block of type typ.
func Encode(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// newSerial returns a random 128-bit serial number, as RFC 5280 asks of a CA
// that keeps no counter.
func newSerial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("serial number: %w", err)
	}
	return n, nil
}

// ParseCA reads a CA written by NewCA's caller: its certificate and its
// PKCS #8 ECDSA key, PEM-encoded. It checks that the certificate is a CA's
// and that the key is its key, so a later Issue signs what the CA's
// holders verify.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("CA certificate: no PEM CERTIFICATE block")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	if !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("certificate %q is not a CA's", cert.Subject.CommonName)
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil || kb.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("CA key: no PEM PRIVATE KEY block")
	}
	parsed, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	key, ok := parsed.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("CA key: %T, want an ECDSA key", parsed)
	}
	if pub, ok := cert.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&key.PublicKey) {
		return nil, fmt.Errorf("CA key does not belong to certificate %q", cert.Subject.CommonName)
	}
	return &CA{Cert: cert, Key: key, CertPEM: Encode("CERTIFICATE", cert.Raw)}, nil
}

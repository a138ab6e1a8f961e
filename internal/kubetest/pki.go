package kubetest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/rest"
)

// certValidity is long enough for a demo left running for days and short
// enough that a leaked test key is worthless soon.
const certValidity = 30 * 24 * time.Hour

// authority is the one CA of a test control plane. It signs the serving
// certificate and every client certificate; the API server trusts it for
// client authentication.
type authority struct {
	cert    *x509.Certificate
	key     crypto.Signer
	certPEM []byte
}

// ECDSA P-256 keys are used throughout: generating them takes microseconds,
// where RSA keys would add noticeable time to every test cluster.
func newKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

func serialNumber() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func newAuthority(name string) (*authority, error) {
	key, err := newKey()
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, fmt.Errorf("generate CA serial: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name + "-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("sign CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	return &authority{cert: cert, key: key, certPEM: pemBlock("CERTIFICATE", der)}, nil
}

// issue signs a leaf certificate. Client certificates carry the user in the
// common name and the groups in the organizations, which is how the API
// server's x509 authenticator reads them.
func (a *authority) issue(cn string, orgs []string, usage x509.ExtKeyUsage, ips []net.IP, dnsNames []string) (certPEM, keyPEM []byte, err error) {
	key, err := newKey()
	if err != nil {
		return nil, nil, fmt.Errorf("generate key for %s: %w", cn, err)
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, nil, fmt.Errorf("generate serial for %s: %w", cn, err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		IPAddresses:  ips,
		DNSNames:     dnsNames,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, key.Public(), a.key)
	if err != nil {
		return nil, nil, fmt.Errorf("sign certificate for %s: %w", cn, err)
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pemBlock("CERTIFICATE", der), keyPEM, nil
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode private key: %w", err)
	}
	return pemBlock("PRIVATE KEY", der), nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// apiServerPKI is everything on disk the API server is started with.
type apiServerPKI struct {
	ca                  *authority
	caFile              string
	servingCert         string
	servingKey          string
	serviceAccountKey   string
	serviceAccountPub   string
	adminCert, adminKey []byte
}

// writeAPIServerPKI creates the CA, the serving certificate for the loopback
// address, the service account signing key pair and the admin client
// certificate (group system:masters) in dir.
func writeAPIServerPKI(dir, name string) (*apiServerPKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	ca, err := newAuthority(name)
	if err != nil {
		return nil, err
	}
	p := &apiServerPKI{
		ca:                ca,
		caFile:            filepath.Join(dir, "ca.crt"),
		servingCert:       filepath.Join(dir, "apiserver.crt"),
		servingKey:        filepath.Join(dir, "apiserver.key"),
		serviceAccountKey: filepath.Join(dir, "sa.key"),
		serviceAccountPub: filepath.Join(dir, "sa.pub"),
	}
	servingCert, servingKey, err := ca.issue("kube-apiserver", nil, x509.ExtKeyUsageServerAuth,
		[]net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"})
	if err != nil {
		return nil, err
	}
	p.adminCert, p.adminKey, err = ca.issue("plexus-admin", []string{"system:masters"}, x509.ExtKeyUsageClientAuth, nil, nil)
	if err != nil {
		return nil, err
	}
	saKey, err := newKey()
	if err != nil {
		return nil, fmt.Errorf("generate service account key: %w", err)
	}
	saKeyPEM, err := encodeKey(saKey)
	if err != nil {
		return nil, err
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return nil, fmt.Errorf("encode service account public key: %w", err)
	}
	files := []struct {
		path string
		data []byte
	}{
		{p.caFile, ca.certPEM},
		{p.servingCert, servingCert},
		{p.servingKey, servingKey},
		{p.serviceAccountKey, saKeyPEM},
		{p.serviceAccountPub, pemBlock("PUBLIC KEY", saPubDER)},
	}
	for _, f := range files {
		if err := os.WriteFile(f.path, f.data, 0o600); err != nil {
			return nil, fmt.Errorf("write %s: %w", f.path, err)
		}
	}
	return p, nil
}

// WritePKI writes into dir what a kube-apiserver that kubetest does not
// start (docker-compose runs the official image) needs to serve at server:
// ca.crt, apiserver.crt and apiserver.key, the service account key pair
// sa.key and sa.pub, and kubeconfig, an admin (system:masters) kubeconfig
// for server. Paths inside the files are not used: the kubeconfig carries
// its certificates inline.
func WritePKI(dir, name, server string) error {
	pki, err := writeAPIServerPKI(dir, name)
	if err != nil {
		return err
	}
	return writeKubeconfig(filepath.Join(dir, "kubeconfig"), name, &rest.Config{
		Host: server,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   pki.ca.certPEM,
			CertData: pki.adminCert,
			KeyData:  pki.adminKey,
		},
	})
}

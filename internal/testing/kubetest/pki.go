package kubetest

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/rest"

	"github.com/plexusnet/plexus/internal/pki"
)

// certValidity is long enough for a demo left running for days and short
// enough that a leaked test key is worthless soon.
const certValidity = 30 * 24 * time.Hour

// authority is the one CA of a test control plane. It signs the serving
// certificate and every client certificate; the API server trusts it for
// client authentication.
type authority struct{ *pki.CA }

func newAuthority(name string) (*authority, error) {
	now := time.Now()
	ca, err := pki.NewCA(pkix.Name{CommonName: name + "-ca"}, now.Add(-time.Hour), now.Add(certValidity))
	if err != nil {
		return nil, err
	}
	return &authority{ca}, nil
}

// issue signs a leaf certificate. Client certificates carry the user in the
// common name and the groups in the organizations, which is how the API
// server's x509 authenticator reads them.
func (a *authority) issue(cn string, orgs []string, usage x509.ExtKeyUsage, ips []net.IP, dnsNames []string) (certPEM, keyPEM []byte, err error) {
	now := time.Now()
	return a.Issue(pki.Leaf{
		Subject:  pkix.Name{CommonName: cn, Organization: orgs},
		IPs:      ips,
		DNSNames: dnsNames,
		Usages:   []x509.ExtKeyUsage{usage},
	}, now.Add(-time.Hour), now.Add(certValidity))
}

// apiServerPKI is everything on disk the API server is started with.
type apiServerPKI struct {
	ca                *authority
	caFile            string
	servingCert       string
	servingKey        string
	serviceAccountKey string
	serviceAccountPub string
	// kubeletClientCert and kubeletClientKey are what the API server
	// shows a kubelet API (the data plane's exec and logs) it calls.
	kubeletClientCert   string
	kubeletClientKey    string
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
		kubeletClientCert: filepath.Join(dir, "kubelet-client.crt"),
		kubeletClientKey:  filepath.Join(dir, "kubelet-client.key"),
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
	kubeletCert, kubeletKey, err := ca.issue("kube-apiserver-kubelet-client", []string{"system:masters"}, x509.ExtKeyUsageClientAuth, nil, nil)
	if err != nil {
		return nil, err
	}
	saKey, err := pki.NewKey()
	if err != nil {
		return nil, fmt.Errorf("generate service account key: %w", err)
	}
	saKeyPEM, err := pki.EncodeKey(saKey)
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
		{p.caFile, ca.CertPEM},
		{p.servingCert, servingCert},
		{p.servingKey, servingKey},
		{p.serviceAccountKey, saKeyPEM},
		{p.serviceAccountPub, pki.Encode("PUBLIC KEY", saPubDER)},
		{p.kubeletClientCert, kubeletCert},
		{p.kubeletClientKey, kubeletKey},
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
	files, err := writeAPIServerPKI(dir, name)
	if err != nil {
		return err
	}
	return writeKubeconfig(filepath.Join(dir, "kubeconfig"), name, &rest.Config{
		Host: server,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   files.ca.CertPEM,
			CertData: files.adminCert,
			KeyData:  files.adminKey,
		},
	})
}

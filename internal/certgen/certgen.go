// Package certgen issues the certificates of a Plexus deployment that has no
// PKI of its own: a local CA (ECDSA P-256), one certificate per service and
// one for the operator (plexusctl), written as PEM files into a folder.
//
// # Identities
//
// Every certificate names its holder by a SPIFFE ID,
// spiffe://plexus.local/<name>, which package auth takes as the caller's
// principal and the policies in deploy/policy allow by name. The subject
// common name is <name> as well.
//
// A service uses one certificate both as server (--tls-cert) and as client
// of the services it calls (--peer-ca presents --tls-cert), so a service
// certificate carries both extended key usages and the names the service
// is reached by: localhost, 127.0.0.1, ::1, its name, and its Kubernetes
// Service names (plexus-allocator, plexus-allocator.plexus-system.svc, …).
// The operator certificate is a client certificate only.
//
// # Layout
//
//	DIR/ca.crt           the CA certificate
//	DIR/ca.key           the CA key: keep it away from the services
//	DIR/<name>/tls.crt   the certificate of allocator, membership, importer,
//	DIR/<name>/tls.key   repair or operator, with its key and the CA, so one
//	DIR/<name>/ca.crt    folder is one Kubernetes Secret (kubectl create
//	                     secret generic plexus-<name>-tls --from-file=DIR/<name>)
//
// GenerateMember issues, with the same CA, certificates named by the
// per-cluster identities of package auth: one member cluster's membership,
// importer and repair (DIR/<cluster>/<service>/), or a clusterset's fleet
// repair and operator (DIR/fleet/<service>/).
//
// Keys are written with mode 0600, certificates with 0644; every file is
// written to a temporary name and renamed, so a server reloading its
// certificate never reads half a file.
package certgen

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/plexusnet/plexus/internal/atomicfile"
	"github.com/plexusnet/plexus/internal/netparse"
	"github.com/plexusnet/plexus/internal/pki"
)

// TrustDomain is the SPIFFE trust domain of the identities.
const TrustDomain = "plexus.local"

// Operator is the identity of the operator's client certificate.
const Operator = "operator"

// Services are the identities that get a server and client certificate.
var Services = []string{"allocator", "membership", "importer", "repair"}

// Defaults of Options.
const (
	DefaultValidity   = 365 * 24 * time.Hour
	DefaultCAValidity = 10 * 365 * 24 * time.Hour
	DefaultNamespace  = "plexus-system"
)

// SPIFFEID returns the SPIFFE ID, and so the principal, of identity name.
func SPIFFEID(name string) string {
	return "spiffe://" + TrustDomain + "/" + name
}

// Paths are the files of one identity.
type Paths struct {
	// Cert and Key are the identity's certificate and private key.
	Cert, Key string
	// CA is a copy of the CA certificate.
	CA string
}

// For returns the files of identity name (a service or Operator) in dir.
func For(dir, name string) Paths {
	d := filepath.Join(dir, name)
	return Paths{Cert: filepath.Join(d, "tls.crt"), Key: filepath.Join(d, "tls.key"), CA: filepath.Join(d, "ca.crt")}
}

// CAFiles returns the CA's certificate and key files in dir.
func CAFiles(dir string) (cert, key string) {
	return filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
}

// Options say what Generate issues.
type Options struct {
	// Dir is the folder to write into; it is created when missing.
	Dir string
	// Validity is how long the service and operator certificates are
	// valid (DefaultValidity when zero).
	Validity time.Duration
	// CAValidity is how long the CA is valid (DefaultCAValidity when zero);
	// at least Validity.
	CAValidity time.Duration
	// Namespace is the Kubernetes namespace of the services' DNS names
	// (DefaultNamespace when empty).
	Namespace string
	// SANs are extra names of the service certificates (see ParseSAN).
	SANs []SAN
	// Force overwrites existing files; without it Generate refuses to touch
	// a folder that holds any of the files it would write.
	Force bool
}

// ErrExists is returned (wrapped) when a file Generate would write exists
// and Options.Force is not set.
var ErrExists = errors.New("file exists")

// SAN is an extra name of service certificates: a DNS name or an IP
// address, for one service or, when Service is "", for all of them.
type SAN struct {
	Service string
	DNS     string
	IP      netip.Addr
}

// ParseSAN parses one --san value, "[SERVICE=]NAME". NAME is an IP address
// (parsed strictly, see package netparse) or a DNS name, lowercase, with at
// most a leading wildcard label.
func ParseSAN(v string) (SAN, error) {
	var san SAN
	name := v
	if svc, n, ok := strings.Cut(v, "="); ok {
		if !slices.Contains(Services, svc) {
			return SAN{}, fmt.Errorf("SAN %q: %q is not a service (%s)", v, svc, strings.Join(Services, ", "))
		}
		san.Service, name = svc, n
	}
	if looksLikeIP(name) {
		ip, err := netparse.ParseAddr(name)
		if err != nil {
			return SAN{}, fmt.Errorf("SAN %q: %w", v, err)
		}
		san.IP = ip
		return san, nil
	}
	check := validation.IsDNS1123Subdomain
	if strings.HasPrefix(name, "*.") {
		check = validation.IsWildcardDNS1123Subdomain
	}
	if msgs := check(name); len(msgs) > 0 {
		return SAN{}, fmt.Errorf("SAN %q: want an IP address or a DNS name: %s", v, strings.Join(msgs, "; "))
	}
	san.DNS = name
	return san, nil
}

// looksLikeIP tells an address (which must then parse as one) from a
// name: "10.0.0.010" is a malformed address, not a host called that.
func looksLikeIP(s string) bool {
	return strings.Contains(s, ":") || strings.Trim(s, "0123456789.") == ""
}

// leaf is one certificate to issue.
type leaf struct {
	name   string
	server bool
	// id is the SPIFFE ID; SPIFFEID(name) when empty.
	id string
	// units are the subject's organizational units.
	units []string
	dns   []string
	ips   []net.IP
}

// file is one file to write.
type file struct {
	path string
	data []byte
	mode fs.FileMode
}

// Generate issues a new CA and the certificates of every service and of the
// operator, and writes them into opts.Dir. It returns the files written.
func Generate(opts Options) ([]string, error) {
	if opts.Dir == "" {
		return nil, errors.New("no folder to write the certificates into")
	}
	if opts.Validity == 0 {
		opts.Validity = DefaultValidity
	}
	if opts.CAValidity == 0 {
		opts.CAValidity = DefaultCAValidity
	}
	if opts.Namespace == "" {
		opts.Namespace = DefaultNamespace
	}
	if opts.Validity < 0 || opts.CAValidity < opts.Validity {
		return nil, fmt.Errorf("validity %s and CA validity %s: both positive, the CA's at least as long", opts.Validity, opts.CAValidity)
	}
	if msgs := validation.IsDNS1123Label(opts.Namespace); len(msgs) > 0 {
		return nil, fmt.Errorf("namespace %q: %s", opts.Namespace, strings.Join(msgs, "; "))
	}

	leaves, err := plan(opts)
	if err != nil {
		return nil, err
	}
	// Refuse before anything is generated or written, so a refused run
	// leaves the folder as it was.
	caCert, caKey := CAFiles(opts.Dir)
	paths := []string{caCert, caKey}
	for _, l := range leaves {
		p := For(opts.Dir, l.name)
		paths = append(paths, p.Cert, p.Key, p.CA)
	}
	if !opts.Force {
		if err := refuseExisting(paths, "give --force to replace every certificate and the CA"); err != nil {
			return nil, err
		}
	}

	now := time.Now()
	// Clocks a little behind still accept the certificates.
	notBefore := now.Add(-5 * time.Minute)
	ca, err := pki.NewCA(caSubject(now), notBefore, now.Add(opts.CAValidity))
	if err != nil {
		return nil, err
	}
	caKeyPEM, err := ca.KeyPEM()
	if err != nil {
		return nil, err
	}
	caPEM := ca.CertPEM
	files := []file{{caCert, caPEM, 0o644}, {caKey, caKeyPEM, 0o600}}
	for _, l := range leaves {
		certPEM, keyPEM, err := issue(ca, l, notBefore, now.Add(opts.Validity))
		if err != nil {
			return nil, fmt.Errorf("issue %s: %w", l.name, err)
		}
		p := For(opts.Dir, l.name)
		files = append(files, file{p.Cert, certPEM, 0o644}, file{p.Key, keyPEM, 0o600}, file{p.CA, caPEM, 0o644})
	}
	for _, f := range files {
		if err := writeFile(f); err != nil {
			return nil, err
		}
	}
	return paths, nil
}

// caSubject is the subject of a CA created at now.
func caSubject(now time.Time) pkix.Name {
	return pkix.Name{Organization: []string{"Plexus"}, CommonName: "Plexus CA " + now.UTC().Format("2006-01-02T15:04:05Z")}
}

// refuseExisting returns ErrExists (wrapped, with hint) when any of paths
// exists.
func refuseExisting(paths []string, hint string) error {
	var existing []string
	for _, p := range paths {
		if _, err := os.Lstat(p); err == nil {
			existing = append(existing, p)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if len(existing) > 0 {
		return fmt.Errorf("%s: %w (%s)", strings.Join(existing, ", "), ErrExists, hint)
	}
	return nil
}

// plan lists the certificates to issue with their names.
func plan(opts Options) ([]leaf, error) {
	for _, san := range opts.SANs {
		if san.Service != "" && !slices.Contains(Services, san.Service) {
			return nil, fmt.Errorf("extra SANs for %q: not a service (%s)", san.Service, strings.Join(Services, ", "))
		}
	}
	var out []leaf
	for _, svc := range Services {
		out = append(out, serviceLeaf(svc, opts.Namespace, opts.SANs))
	}
	return append(out, leaf{name: Operator}), nil
}

// serviceLeaf is the server and client certificate of service svc, valid
// for the names it is reached by in namespace and for sans.
func serviceLeaf(svc, namespace string, sans []SAN) leaf {
	l := leaf{name: svc, server: true, ips: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}}
	k8s := "plexus-" + svc
	l.dns = []string{"localhost", svc, k8s, k8s + "." + namespace, k8s + "." + namespace + ".svc",
		k8s + "." + namespace + ".svc.cluster.local"}
	for _, san := range sans {
		switch {
		case san.Service != "" && san.Service != svc:
		case san.IP.IsValid():
			if ip := net.IP(san.IP.AsSlice()); !slices.ContainsFunc(l.ips, ip.Equal) {
				l.ips = append(l.ips, ip)
			}
		case !slices.Contains(l.dns, san.DNS):
			l.dns = append(l.dns, san.DNS)
		}
	}
	return l
}

// issue signs l's certificate: named by its SPIFFE ID, for client
// authentication, and for serving too when l is a service.
func issue(ca *pki.CA, l leaf, notBefore, notAfter time.Time) (certPEM, keyPEM []byte, err error) {
	spiffe := l.id
	if spiffe == "" {
		spiffe = SPIFFEID(l.name)
	}
	id, err := url.Parse(spiffe)
	if err != nil {
		return nil, nil, err
	}
	usages := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if l.server {
		usages = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	}
	return ca.Issue(pki.Leaf{
		Subject:  pkix.Name{Organization: []string{"Plexus"}, OrganizationalUnit: l.units, CommonName: l.name},
		URIs:     []*url.URL{id},
		DNSNames: l.dns,
		IPs:      l.ips,
		Usages:   usages,
	}, notBefore, notAfter)
}

// writeFile writes f through a temporary file in the same folder, so
// readers see the old or the new content, never a mix.
func writeFile(f file) error {
	dir := filepath.Dir(f.path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	return atomicfile.Write(f.path, f.data, f.mode)
}

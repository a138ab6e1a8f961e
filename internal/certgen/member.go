package certgen

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/plexusnet/plexus/internal/auth"
	"github.com/plexusnet/plexus/internal/pki"
)

// MemberServices are the services that run in every member cluster and so
// get a certificate naming their cluster.
var MemberServices = []string{"membership", "importer", "repair"}

// FleetServices are the identities a fleet certificate is issued for: a
// repair that releases what no single cluster owns, and an operator.
var FleetServices = []string{"repair", Operator}

// FleetFolder is the folder, under the certificates' folder, of the fleet
// identities. A member cluster cannot be called so (see MemberOptions).
const FleetFolder = "fleet"

// MemberOptions say what GenerateMember issues: the certificates of one
// member cluster's services, or, with Fleet, the fleet identities of a
// clusterset.
type MemberOptions struct {
	// Dir is the folder of the CA (ca.crt and ca.key, see Generate); when
	// it holds neither, a new CA is created there.
	Dir string
	// Clusterset names the clusterset; a DNS label.
	Clusterset string
	// Cluster is the member cluster's id, a DNS label; empty with Fleet.
	Cluster string
	// Fleet issues the fleet identities instead of a cluster's.
	Fleet bool
	// Validity, Namespace and SANs are as in Options.
	Validity  time.Duration
	Namespace string
	SANs      []SAN
	// Force replaces the cluster's (or the fleet's) certificates; the CA
	// is kept.
	Force bool
}

// MemberFor returns the files of service in member cluster cluster, or of
// the fleet identity service when cluster is "".
func MemberFor(dir, cluster, service string) Paths {
	if cluster == "" {
		cluster = FleetFolder
	}
	return For(filepath.Join(dir, cluster), service)
}

// GenerateMember issues the certificates opts asks for, signed by the CA in
// opts.Dir, and writes them to DIR/<cluster>/<service>/ (DIR/fleet/<service>/
// for the fleet identities). Each is named by the SPIFFE ID
// auth.ClusterPrincipal or auth.FleetPrincipal returns, and its subject
// says the same in its organizational units. It returns the files written.
func GenerateMember(opts MemberOptions) ([]string, error) {
	services, err := checkMember(&opts)
	if err != nil {
		return nil, err
	}
	var leaves []leaf
	for _, svc := range services {
		l := leaf{name: svc}
		if svc != Operator {
			l = serviceLeaf(svc, opts.Namespace, opts.SANs)
		}
		l.id, l.units = auth.FleetPrincipal(TrustDomain, opts.Clusterset, svc), []string{"clusterset " + opts.Clusterset, "fleet"}
		if !opts.Fleet {
			l.id = auth.ClusterPrincipal(TrustDomain, opts.Clusterset, opts.Cluster, svc)
			l.units = []string{"clusterset " + opts.Clusterset, "cluster " + opts.Cluster}
		}
		leaves = append(leaves, l)
	}
	var paths []string
	for _, l := range leaves {
		p := MemberFor(opts.Dir, opts.Cluster, l.name)
		paths = append(paths, p.Cert, p.Key, p.CA)
	}
	if !opts.Force {
		if err := refuseExisting(paths, "give --force to replace these certificates; the CA is kept"); err != nil {
			return nil, err
		}
	}
	now := time.Now()
	notBefore := now.Add(-5 * time.Minute)
	ca, files, err := loadOrCreateCA(opts.Dir, now)
	if err != nil {
		return nil, err
	}
	if now.Add(opts.Validity).After(ca.Cert.NotAfter) {
		return nil, fmt.Errorf("validity %s: the CA in %s expires before, on %s", opts.Validity, opts.Dir, ca.Cert.NotAfter.UTC().Format(time.RFC3339))
	}
	for _, l := range leaves {
		certPEM, keyPEM, err := issue(ca, l, notBefore, now.Add(opts.Validity))
		if err != nil {
			return nil, fmt.Errorf("issue %s: %w", l.id, err)
		}
		p := MemberFor(opts.Dir, opts.Cluster, l.name)
		files = append(files, file{p.Cert, certPEM, 0o644}, file{p.Key, keyPEM, 0o600}, file{p.CA, ca.CertPEM, 0o644})
	}
	var written []string
	for _, f := range files {
		if err := writeFile(f); err != nil {
			return nil, err
		}
		written = append(written, f.path)
	}
	return written, nil
}

// checkMember validates opts, fills in defaults and returns the services
// to issue certificates for.
func checkMember(opts *MemberOptions) ([]string, error) {
	if opts.Dir == "" {
		return nil, errors.New("no folder to write the certificates into")
	}
	if opts.Validity == 0 {
		opts.Validity = DefaultValidity
	}
	if opts.Namespace == "" {
		opts.Namespace = DefaultNamespace
	}
	if opts.Validity < 0 {
		return nil, fmt.Errorf("validity %s: want a positive duration", opts.Validity)
	}
	for what, v := range map[string]string{"namespace": opts.Namespace, "clusterset": opts.Clusterset} {
		if msgs := validation.IsDNS1123Label(v); len(msgs) > 0 {
			return nil, fmt.Errorf("%s %q: %s", what, v, strings.Join(msgs, "; "))
		}
	}
	services := FleetServices
	switch {
	case opts.Fleet && opts.Cluster != "":
		return nil, errors.New("a cluster's certificates or the fleet's, not both")
	case opts.Fleet:
	case opts.Cluster == FleetFolder:
		return nil, fmt.Errorf("cluster %q: the name of the fleet identities' folder", opts.Cluster)
	default:
		if msgs := validation.IsDNS1123Label(opts.Cluster); len(msgs) > 0 {
			return nil, fmt.Errorf("cluster %q: %s", opts.Cluster, strings.Join(msgs, "; "))
		}
		services = MemberServices
	}
	for _, san := range opts.SANs {
		if san.Service != "" && !slices.Contains(services, san.Service) {
			return nil, fmt.Errorf("extra SANs for %q: no certificate of it is issued here (%s)", san.Service, strings.Join(services, ", "))
		}
	}
	return services, nil
}

// loadOrCreateCA reads the CA in dir; when dir holds neither of its files,
// it creates one and returns its files to write with the leaves.
func loadOrCreateCA(dir string, now time.Time) (*pki.CA, []file, error) {
	certFile, keyFile := CAFiles(dir)
	certPEM, certErr := os.ReadFile(certFile)
	keyPEM, keyErr := os.ReadFile(keyFile)
	switch {
	case errors.Is(certErr, fs.ErrNotExist) && errors.Is(keyErr, fs.ErrNotExist):
		ca, err := pki.NewCA(caSubject(now), now.Add(-5*time.Minute), now.Add(DefaultCAValidity))
		if err != nil {
			return nil, nil, err
		}
		key, err := ca.KeyPEM()
		if err != nil {
			return nil, nil, err
		}
		return ca, []file{{certFile, ca.CertPEM, 0o644}, {keyFile, key, 0o600}}, nil
	case certErr != nil:
		return nil, nil, fmt.Errorf("read the CA: %w", certErr)
	case keyErr != nil:
		return nil, nil, fmt.Errorf("read the CA's key: %w", keyErr)
	}
	ca, err := pki.ParseCA(certPEM, keyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("the CA in %s: %w", dir, err)
	}
	return ca, nil, nil
}

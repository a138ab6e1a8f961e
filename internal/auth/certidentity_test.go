package auth

import (
	"crypto/x509/pkix"
	"net/url"
	"testing"
	"time"

	"github.com/plexusnet/plexus/internal/pki"
)

func issueFor(t testing.TB, cn string, uri string) []byte {
	t.Helper()
	now := time.Now()
	ca, err := pki.NewCA(pkix.Name{CommonName: "ca"}, now.Add(-time.Minute), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var uris []*url.URL
	if uri != "" {
		u, err := url.Parse(uri)
		if err != nil {
			t.Fatal(err)
		}
		uris = append(uris, u)
	}
	certPEM, keyPEM, err := ca.Issue(pki.Leaf{Subject: pkix.Name{CommonName: cn}, URIs: uris}, now.Add(-time.Minute), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// A key before the certificate, as some bundles have it.
	return append(keyPEM, certPEM...)
}

func TestCertIdentity(t *testing.T) {
	id, ok, err := CertIdentity(issueFor(t, "repair", ClusterPrincipal("plexus.local", "east", "a", "repair")))
	if err != nil || !ok || id.Cluster != "a" || id.Clusterset != "east" || id.Service != "repair" {
		t.Fatalf("cluster-bound: %+v %v %v", id, ok, err)
	}
	id, ok, err = CertIdentity(issueFor(t, "repair", "spiffe://plexus.local/repair"))
	if err != nil || !ok || !id.Shared || !id.Fleet() {
		t.Fatalf("shared: %+v %v %v", id, ok, err)
	}
	id, ok, err = CertIdentity(issueFor(t, "ops", ""))
	if err != nil || !ok || id.Principal != "ops" {
		t.Fatalf("common name: %+v %v %v", id, ok, err)
	}
	for _, bad := range []string{"", "junk", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"} {
		if _, _, err := CertIdentity([]byte(bad)); err == nil {
			t.Fatalf("%q: no error", bad)
		}
	}
}

func FuzzCertIdentity(f *testing.F) {
	f.Add(issueFor(f, "repair", ClusterPrincipal("plexus.local", "east", "a", "repair")))
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		id, ok, err := CertIdentity(data)
		if err != nil && (ok || id != (Identity{})) {
			t.Fatalf("an error with an identity: %+v %v", id, ok)
		}
	})
}

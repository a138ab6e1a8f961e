package cmd

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/plexusnet/plexus/internal/auth"
	"github.com/plexusnet/plexus/internal/certgen"
)

func runCerts(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	root := NewRoot(&out)
	root.SetArgs(append([]string{"certs"}, args...))
	err := root.Execute()
	return out.String(), err
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	block, rest := pem.Decode(data)
	require.NotNil(t, block, "%s holds PEM", path)
	require.Empty(t, bytes.TrimSpace(rest), "%s holds one certificate", path)
	require.Equal(t, "CERTIFICATE", block.Type)
	cert, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	return cert
}

// TestCerts: the CA and every certificate are written with their keys, each
// chains to the CA for what it is used for, carries its SPIFFE ID and the
// names it is reached by, and keys are private to their owner.
func TestCerts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	out, err := runCerts(t, "--dir", dir, "--validity", "48h",
		"--san", "10.0.0.5", "--san", "2001:db8::1", "--san", "membership=members.cluster-a.example.net")
	require.NoError(t, err)
	require.Contains(t, out, "kubectl -n plexus-system create secret generic plexus-allocator-tls --from-file="+filepath.Join(dir, "allocator"))

	caFile, caKeyFile := certgen.CAFiles(dir)
	ca := readCert(t, caFile)
	require.True(t, ca.IsCA)
	require.True(t, ca.MaxPathLenZero, "the CA signs leaves only")
	require.Equal(t, x509.KeyUsageCertSign|x509.KeyUsageCRLSign, ca.KeyUsage)
	require.NoError(t, ca.CheckSignatureFrom(ca), "self-signed")
	caPub, ok := ca.PublicKey.(*ecdsa.PublicKey)
	require.True(t, ok, "an ECDSA CA")
	require.Equal(t, elliptic.P256(), caPub.Curve)
	roots := x509.NewCertPool()
	roots.AddCert(ca)

	for _, name := range append(append([]string{}, certgen.Services...), certgen.Operator) {
		t.Run(name, func(t *testing.T) {
			p := certgen.For(dir, name)
			cert := readCert(t, p.Cert)
			require.Equal(t, ca.Raw, readCert(t, p.CA).Raw, "the folder carries the CA")
			_, err := tls.LoadX509KeyPair(p.Cert, p.Key)
			require.NoError(t, err, "the key belongs to the certificate")

			require.Len(t, cert.URIs, 1)
			require.Equal(t, "spiffe://plexus.local/"+name, cert.URIs[0].String())
			require.Equal(t, certgen.SPIFFEID(name), cert.URIs[0].String())
			require.Equal(t, name, cert.Subject.CommonName)
			require.WithinDuration(t, time.Now().Add(48*time.Hour), cert.NotAfter, time.Minute)
			require.False(t, cert.IsCA)

			// A client certificate for everyone.
			_, err = cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
			require.NoError(t, err, "client certificate")

			if name == certgen.Operator {
				require.Empty(t, cert.DNSNames)
				require.Empty(t, cert.IPAddresses)
				_, err = cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: "localhost"})
				require.Error(t, err, "the operator's certificate serves nothing")
				return
			}
			// A server certificate for every name the service is reached by.
			names := []string{"localhost", "127.0.0.1", "::1", "10.0.0.5", "2001:db8::1", name, "plexus-" + name,
				"plexus-" + name + ".plexus-system", "plexus-" + name + ".plexus-system.svc",
				"plexus-" + name + ".plexus-system.svc.cluster.local"}
			if name == "membership" {
				names = append(names, "members.cluster-a.example.net")
			} else {
				_, err = cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: "members.cluster-a.example.net"})
				require.Error(t, err, "a SAN for one service only")
			}
			for _, n := range names {
				_, err = cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: n, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
				require.NoError(t, err, "server certificate for %s", n)
			}
			_, err = cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: "plexus-" + name + ".elsewhere.svc"})
			require.Error(t, err)
		})
	}

	// Keys are private; certificates are not.
	for _, f := range []string{caKeyFile, certgen.For(dir, "repair").Key, certgen.For(dir, certgen.Operator).Key} {
		st, err := os.Stat(f)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), st.Mode().Perm(), f)
	}
	st, err := os.Stat(caFile)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o644), st.Mode().Perm())

	// Another CA does not verify these certificates.
	other := filepath.Join(t.TempDir(), "other")
	_, err = runCerts(t, "--dir", other)
	require.NoError(t, err)
	otherRoots := x509.NewCertPool()
	otherRoots.AddCert(readCert(t, filepath.Join(other, "ca.crt")))
	_, err = readCert(t, certgen.For(dir, "allocator").Cert).Verify(x509.VerifyOptions{Roots: otherRoots, DNSName: "localhost"})
	require.Error(t, err)
}

// TestCertsRefusesToOverwrite: a second run leaves existing files alone
// unless --force, which replaces the CA and every certificate.
func TestCertsRefusesToOverwrite(t *testing.T) {
	dir := t.TempDir()
	_, err := runCerts(t, "--dir", dir)
	require.NoError(t, err)
	caFile, _ := certgen.CAFiles(dir)
	before, err := os.ReadFile(caFile)
	require.NoError(t, err)
	keyBefore, err := os.ReadFile(certgen.For(dir, "importer").Key)
	require.NoError(t, err)

	_, err = runCerts(t, "--dir", dir)
	require.ErrorIs(t, err, certgen.ErrExists)
	require.ErrorContains(t, err, "--force")
	after, err := os.ReadFile(caFile)
	require.NoError(t, err)
	require.Equal(t, before, after, "a refused run changes nothing")

	// One leftover file is enough to refuse, and nothing new is written.
	lone := t.TempDir()
	p := certgen.For(lone, "repair")
	require.NoError(t, os.MkdirAll(filepath.Dir(p.Key), 0o755))
	require.NoError(t, os.WriteFile(p.Key, []byte("mine"), 0o600))
	_, err = runCerts(t, "--dir", lone)
	require.ErrorIs(t, err, certgen.ErrExists)
	_, err = os.Stat(filepath.Join(lone, "ca.crt"))
	require.ErrorIs(t, err, os.ErrNotExist)

	_, err = runCerts(t, "--dir", dir, "--force")
	require.NoError(t, err)
	after, err = os.ReadFile(caFile)
	require.NoError(t, err)
	require.NotEqual(t, before, after, "a new CA")
	keyAfter, err := os.ReadFile(certgen.For(dir, "importer").Key)
	require.NoError(t, err)
	require.NotEqual(t, keyBefore, keyAfter, "new keys")
	roots := x509.NewCertPool()
	roots.AddCert(readCert(t, caFile))
	_, err = readCert(t, certgen.For(dir, "importer").Cert).Verify(x509.VerifyOptions{Roots: roots, DNSName: "localhost"})
	require.NoError(t, err, "the new certificates chain to the new CA")
}

// TestCertsFlags: bad input is refused before anything is written.
func TestCertsFlags(t *testing.T) {
	for name, args := range map[string][]string{
		"unknown service":            {"--san", "gateway=gw.example.net"},
		"not a DNS name":             {"--san", "http://x"},
		"CA shorter than its leaves": {"--validity", "48h", "--ca-validity", "24h"},
		"negative validity":          {"--validity", "-1h"},
		"bad namespace":              {"--namespace", "Plexus System"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "certs")
			_, err := runCerts(t, append([]string{"--dir", dir}, args...)...)
			require.Error(t, err)
			_, err = os.Stat(dir)
			require.ErrorIs(t, err, os.ErrNotExist, "nothing written")
		})
	}
}

// TestCertsPerCluster: a member cluster's certificates and the fleet's are
// signed by the CA already in the folder, name their cluster (or the
// fleet) in their SPIFFE ID and subject, and read back as that identity.
func TestCertsPerCluster(t *testing.T) {
	dir := t.TempDir()
	_, err := runCerts(t, "--dir", dir)
	require.NoError(t, err)
	caFile, _ := certgen.CAFiles(dir)
	caBefore, err := os.ReadFile(caFile)
	require.NoError(t, err)

	out, err := runCerts(t, "--dir", dir, "--clusterset", "east", "--cluster", "cluster-a", "--san", "membership=members.a.example.net")
	require.NoError(t, err)
	require.Contains(t, out, "plexus-membership-tls --from-file="+filepath.Join(dir, "cluster-a", "membership"))
	_, err = runCerts(t, "--dir", dir, "--clusterset", "east", "--fleet")
	require.NoError(t, err)
	caAfter, err := os.ReadFile(caFile)
	require.NoError(t, err)
	require.Equal(t, caBefore, caAfter, "the CA is reused")
	roots := x509.NewCertPool()
	roots.AddCert(readCert(t, caFile))

	check := func(t *testing.T, p certgen.Paths, want auth.Identity, units []string) *x509.Certificate {
		cert := readCert(t, p.Cert)
		_, err := tls.LoadX509KeyPair(p.Cert, p.Key)
		require.NoError(t, err)
		_, err = cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		require.NoError(t, err, "chains to the folder's CA")
		got, ok := auth.ParseIdentity(auth.CertPrincipal(cert))
		require.True(t, ok)
		want.Principal = got.Principal
		require.Equal(t, want, got)
		require.ElementsMatch(t, units, cert.Subject.OrganizationalUnit)
		require.Equal(t, want.Service, cert.Subject.CommonName)
		return cert
	}
	for _, svc := range certgen.MemberServices {
		t.Run("cluster-a/"+svc, func(t *testing.T) {
			cert := check(t, certgen.MemberFor(dir, "cluster-a", svc),
				auth.Identity{TrustDomain: certgen.TrustDomain, Clusterset: "east", Cluster: "cluster-a", Service: svc},
				[]string{"clusterset east", "cluster cluster-a"})
			require.Equal(t, auth.ClusterPrincipal(certgen.TrustDomain, "east", "cluster-a", svc), cert.URIs[0].String())
			_, err = cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: "plexus-" + svc + ".plexus-system.svc"})
			require.NoError(t, err, "serves under its Service name")
			_, err = cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: "members.a.example.net"})
			require.Equal(t, svc == "membership", err == nil, "the SAN is the membership's only")
		})
	}
	for _, svc := range certgen.FleetServices {
		t.Run("fleet/"+svc, func(t *testing.T) {
			cert := check(t, certgen.MemberFor(dir, "", svc),
				auth.Identity{TrustDomain: certgen.TrustDomain, Clusterset: "east", Service: svc},
				[]string{"clusterset east", "fleet"})
			id, _ := auth.ParseIdentity(cert.URIs[0].String())
			require.True(t, id.Fleet())
			_, err = cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: "localhost"})
			require.Equal(t, svc != certgen.Operator, err == nil, "only the repair serves")
		})
	}
	_, err = os.Stat(filepath.Join(dir, "cluster-a", "allocator"))
	require.ErrorIs(t, err, os.ErrNotExist, "the allocator keeps its fleet-wide certificate")

	// A second run refuses unless --force, which keeps the CA.
	keyBefore, err := os.ReadFile(certgen.MemberFor(dir, "cluster-a", "importer").Key)
	require.NoError(t, err)
	_, err = runCerts(t, "--dir", dir, "--clusterset", "east", "--cluster", "cluster-a")
	require.ErrorIs(t, err, certgen.ErrExists)
	_, err = runCerts(t, "--dir", dir, "--clusterset", "east", "--cluster", "cluster-a", "--force")
	require.NoError(t, err)
	keyAfter, err := os.ReadFile(certgen.MemberFor(dir, "cluster-a", "importer").Key)
	require.NoError(t, err)
	require.NotEqual(t, keyBefore, keyAfter)
	caAfter, err = os.ReadFile(caFile)
	require.NoError(t, err)
	require.Equal(t, caBefore, caAfter, "--force keeps the CA")

	// An empty folder gets a CA of its own.
	fresh := t.TempDir()
	_, err = runCerts(t, "--dir", fresh, "--clusterset", "east", "--cluster", "b")
	require.NoError(t, err)
	freshRoots := x509.NewCertPool()
	freshRoots.AddCert(readCert(t, filepath.Join(fresh, "ca.crt")))
	_, err = readCert(t, certgen.MemberFor(fresh, "b", "repair").Cert).Verify(x509.VerifyOptions{Roots: freshRoots, DNSName: "localhost"})
	require.NoError(t, err)
}

// TestCertsPerClusterFlags: bad per-cluster input is refused before
// anything is written.
func TestCertsPerClusterFlags(t *testing.T) {
	for name, args := range map[string][]string{
		"no clusterset":        {"--cluster", "a"},
		"no cluster":           {"--clusterset", "east"},
		"cluster and fleet":    {"--clusterset", "east", "--cluster", "a", "--fleet"},
		"bad cluster":          {"--clusterset", "east", "--cluster", "A_1"},
		"bad clusterset":       {"--clusterset", "East", "--cluster", "a"},
		"cluster called fleet": {"--clusterset", "east", "--cluster", "fleet"},
		"SAN of the allocator": {"--clusterset", "east", "--cluster", "a", "--san", "allocator=x.example.net"},
		"CA validity":          {"--clusterset", "east", "--cluster", "a", "--ca-validity", "100000h"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "certs")
			_, err := runCerts(t, append([]string{"--dir", dir}, args...)...)
			require.Error(t, err)
			_, err = os.Stat(dir)
			require.ErrorIs(t, err, os.ErrNotExist, "nothing written")
		})
	}
	// A broken CA is refused.
	dir := t.TempDir()
	caFile, keyFile := certgen.CAFiles(dir)
	require.NoError(t, os.WriteFile(caFile, []byte("junk"), 0o644))
	require.NoError(t, os.WriteFile(keyFile, []byte("junk"), 0o600))
	_, err := runCerts(t, "--dir", dir, "--clusterset", "east", "--cluster", "a")
	require.ErrorContains(t, err, "CA")
}

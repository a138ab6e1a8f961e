package certgen

import (
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseSAN(t *testing.T) {
	tests := []struct {
		in      string
		service string
		dns     string
		ip      string
		bad     bool
	}{
		{in: "plexus.example.net", dns: "plexus.example.net"},
		{in: "membership=members.cluster-a.example.net", service: "membership", dns: "members.cluster-a.example.net"},
		{in: "10.0.0.5", ip: "10.0.0.5"},
		{in: "allocator=2001:db8::1", service: "allocator", ip: "2001:db8::1"},
		{in: "*.plexus.example.net", dns: "*.plexus.example.net"},
		{in: "operator=ops.example.net", bad: true}, // the operator serves nothing
		{in: "gateway=gw.example.net", bad: true},
		{in: "", bad: true},
		{in: "membership=", bad: true},
		{in: "http://x", bad: true},
		{in: "a..b", bad: true},
		{in: "-a.example.net", bad: true},
		{in: "a.*.example.net", bad: true},
		{in: "under_score.example.net", bad: true},
		{in: "Upper.example.net", bad: true},
		{in: "10.0.0.010", bad: true},      // a leading zero: not an address, and not a name either
		{in: "fe80::1%eth0", bad: true},    // a zone
		{in: "::ffff:10.0.0.1", bad: true}, // IPv4-mapped
		{in: "10.0.0", bad: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			san, err := ParseSAN(tc.in)
			if tc.bad {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.service, san.Service)
			require.Equal(t, tc.dns, san.DNS)
			if tc.ip == "" {
				require.False(t, san.IP.IsValid())
			} else {
				require.Equal(t, netip.MustParseAddr(tc.ip), san.IP)
			}
		})
	}
}

func FuzzParseSAN(f *testing.F) {
	for _, s := range []string{"plexus.example.net", "repair=10.1.2.3", "*.a.b", "::1", "fe80::1%eth0", "010.1.1.1", "a=b=c", "allocator=", "x..y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		san, err := ParseSAN(v)
		if err != nil {
			return
		}
		if san.Service != "" && !slices.Contains(Services, san.Service) {
			t.Fatalf("%q: service %q is not one", v, san.Service)
		}
		switch {
		case san.IP.IsValid():
			if san.DNS != "" || san.IP.Zone() != "" || san.IP.Is4In6() {
				t.Fatalf("%q: accepted as %+v", v, san)
			}
		case san.DNS == "":
			t.Fatalf("%q: accepted with neither a name nor an address", v)
		case strings.ContainsAny(san.DNS, " /:=_%") || san.DNS != strings.ToLower(san.DNS):
			t.Fatalf("%q: accepted the name %q", v, san.DNS)
		}
		// Issuing with it works: the name is one x509 takes.
		if _, err := plan(Options{Namespace: DefaultNamespace, SANs: []SAN{san}}); err != nil {
			t.Fatalf("%q: plan: %v", v, err)
		}
	})
}

// TestLayout: the names the manifests, docker-compose.yaml and the demo
// rely on.
func TestLayout(t *testing.T) {
	require.Equal(t, "spiffe://plexus.local/repair", SPIFFEID("repair"))
	require.Equal(t, Paths{
		Cert: filepath.Join("certs", "repair", "tls.crt"),
		Key:  filepath.Join("certs", "repair", "tls.key"),
		CA:   filepath.Join("certs", "repair", "ca.crt"),
	}, For("certs", "repair"))
	cert, key := CAFiles("certs")
	require.Equal(t, filepath.Join("certs", "ca.crt"), cert)
	require.Equal(t, filepath.Join("certs", "ca.key"), key)
}

package certgen

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseSAN(t *testing.T) {
	tests := []struct {
		in            string
		service, name string
		bad           bool
	}{
		{in: "plexus.example.net", name: "plexus.example.net"},
		{in: "membership=members.cluster-a.example.net", service: "membership", name: "members.cluster-a.example.net"},
		{in: "10.0.0.5", name: "10.0.0.5"},
		{in: "allocator=2001:db8::1", service: "allocator", name: "2001:db8::1"},
		{in: "*.plexus.example.net", name: "*.plexus.example.net"},
		{in: "operator=ops.example.net", bad: true}, // the operator serves nothing
		{in: "gateway=gw.example.net", bad: true},
		{in: "", bad: true},
		{in: "membership=", bad: true},
		{in: "http://x", bad: true},
		{in: "a..b", bad: true},
		{in: "-a.example.net", bad: true},
		{in: "a.*.example.net", bad: true},
		{in: "under_score.example.net", bad: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			svc, name, err := ParseSAN(tc.in)
			if tc.bad {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.service, svc)
			require.Equal(t, tc.name, name)
		})
	}
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

package fleet

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	inventoryv1alpha1 "github.com/plexusnet/plexus/api/inventory/v1alpha1"
)

func TestCompare(t *testing.T) {
	old := map[string]Member{
		"a": {Name: "a", Addr: "10.0.0.1:7402"},
		"b": {Name: "b", Addr: "10.0.0.2:7402"},
		"c": {Name: "c", Addr: "10.0.0.3:7402"},
	}
	d := Compare(old, []Member{
		{Name: "a", Addr: "10.0.0.1:7402"},                          // same
		{Name: "b", Addr: "10.0.0.2:7402", ServerName: "b.example"}, // TLS identity changed
		{Name: "d", Addr: "10.0.0.4:7402"},                          // new
	})
	require.Equal(t, []Member{{Name: "d", Addr: "10.0.0.4:7402"}}, d.Joined)
	require.Equal(t, []Member{{Name: "b", Addr: "10.0.0.2:7402", ServerName: "b.example"}}, d.Moved)
	require.Equal(t, []Member{{Name: "b", Addr: "10.0.0.2:7402"}}, d.Was)
	require.Equal(t, []Member{{Name: "c", Addr: "10.0.0.3:7402"}}, d.Left)
	require.True(t, Compare(old, []Member{old["a"], old["b"], old["c"]}).Empty())

	ranged := Member{Name: "a", Addr: "10.0.0.1:7402", Ranges: []string{"10.1.0.0/16"}}
	d = Compare(old, []Member{ranged, old["b"], old["c"]})
	require.Equal(t, []Member{ranged}, d.Moved, "a change of ranges is a change of the member")
	require.True(t, Compare(map[string]Member{"a": ranged}, []Member{ranged}).Empty())
}

func TestRanges(t *testing.T) {
	ms, err := ParseFile([]byte("clusters:\n- name: east\n  address: x:1\n  ranges: [10.1.0.0/16, 'fd00:1::/64']\n"))
	require.NoError(t, err)
	require.Equal(t, []string{"10.1.0.0/16", "fd00:1::/64"}, ms[0].Ranges)
	require.Equal(t, "[10.1.0.0/16 fd00:1::/64]", fmt.Sprint(ms[0].Prefixes()))

	for name, tc := range map[string]struct {
		ranges []string
		want   string
	}{
		"not a CIDR": {[]string{"10.1.0.0"}, `ranges[0] "10.1.0.0": not a CIDR`},
		"host bits":  {[]string{"10.1.0.0/16", "10.1.2.3/16"}, `ranges[1] "10.1.2.3/16": host bits set; did you mean 10.1.0.0/16?`},
		"too many":   {slices.Repeat([]string{"10.0.0.0/8"}, MaxRanges+1), "at most 64"},
	} {
		t.Run(name, func(t *testing.T) {
			err := Member{Name: "east", Addr: "x:1", Ranges: tc.ranges}.Validate()
			require.ErrorContains(t, err, tc.want)
		})
	}

	addr := inventoryv1alpha1.PropertyMembershipAddress
	m, _, ok := FromProfile(profile("east", map[string]string{addr: "x:1", inventoryv1alpha1.PropertyMembershipRanges: "10.1.0.0/16, fd00:1::/64"}), "")
	require.True(t, ok)
	require.Equal(t, []string{"10.1.0.0/16", "fd00:1::/64"}, m.Ranges)
	_, reason, ok := FromProfile(profile("east", map[string]string{addr: "x:1", inventoryv1alpha1.PropertyMembershipRanges: "everything"}), "")
	require.False(t, ok)
	require.Contains(t, reason, "not a CIDR")
}

func TestParseFile(t *testing.T) {
	ms, err := ParseFile([]byte(`
clusters:
- name: west
  address: membership.west.example:7402
  tlsServerName: membership.west.example
- name: east
  address: 10.0.0.1:7402,10.0.0.2:7402
`))
	require.NoError(t, err)
	require.Equal(t, []Member{
		{Name: "east", Addr: "10.0.0.1:7402,10.0.0.2:7402"},
		{Name: "west", Addr: "membership.west.example:7402", ServerName: "membership.west.example"},
	}, ms, "sorted by name")

	// A file that lists no clusters means it only when it says so: a
	// broken ConfigMap must not make every member leave.
	for _, data := range []string{`{"clusters": []}`, "", "# nothing\n", "clusters:\n"} {
		_, err = ParseFile([]byte(data))
		require.ErrorIs(t, err, ErrNoMembers, "%q", data)
	}
	ms, err = ParseFile([]byte(`{"clusters": [], "empty": true}`))
	require.NoError(t, err)
	require.Empty(t, ms)
	_, err = ParseFile([]byte("empty: true\nclusters: [{name: a, address: 'x:1'}]\n"))
	require.ErrorContains(t, err, "says empty: true and lists 1 clusters")

	// An error names the entry as the file lists it.
	_, err = ParseFile([]byte("clusters: [{name: a, address: 'x:1'}, {name: Bad_Name, address: 'x:1'}]"))
	require.ErrorContains(t, err, `member 1 ("Bad_Name"): name "Bad_Name"`)
	require.NotContains(t, err.Error(), "member 0")

	for name, tc := range map[string]struct{ data, want string }{
		"misspelt field":  {"clusters:\n- name: a\n  adress: x:1\n", `unknown field "adress"`},
		"twice":           {"clusters:\n- {name: a, address: 'x:1'}\n- {name: a, address: 'y:1'}\n", `"a" named twice`},
		"bad name":        {"clusters:\n- {name: A_1, address: 'x:1'}\n", `name "A_1"`},
		"no port":         {"clusters:\n- {name: a, address: x}\n", `missing port`},
		"control char":    {"clusters:\n- {name: a, address: \"x:1\\u0000\"}\n", "control characters"},
		"bad server name": {"clusters:\n- {name: a, address: 'x:1', tlsServerName: 'a b'}\n", "tlsServerName"},
		"not yaml":        {"clusters: [", "parse"},
		"too large":       {"#" + strings.Repeat("x", MaxFileSize), "at most"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseFile([]byte(tc.data))
			require.ErrorContains(t, err, tc.want)
			require.Less(t, len(err.Error()), 1000)
		})
	}
}

func FuzzParseFile(f *testing.F) {
	f.Add([]byte("clusters:\n- name: east\n  address: 10.0.0.1:7402\n"))
	f.Add([]byte(`{"clusters":[{"name":"a","address":"dns:///m:1","tlsServerName":"m"}]}`))
	f.Add([]byte("clusters: [{name: a, address: 'x:1'}, {name: a, address: 'x:1'}]"))
	f.Add([]byte("clusters: [{name: a, address: 'x:1', ranges: [10.0.0.0/8, '::/0']}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ms, err := ParseFile(data)
		if err != nil {
			return
		}
		// What parses is a valid set: written back, it reads the same.
		seen := map[string]bool{}
		for _, m := range ms {
			if err := m.Validate(); err != nil {
				t.Fatalf("parsed an invalid member %+v: %v", m, err)
			}
			if seen[m.Name] {
				t.Fatalf("parsed %q twice", m.Name)
			}
			seen[m.Name] = true
		}
		if len(ms) > MaxMembers {
			t.Fatalf("%d members", len(ms))
		}
	})
}

func profile(name string, props map[string]string, conds ...metav1.Condition) *inventoryv1alpha1.ClusterProfile {
	cp := &inventoryv1alpha1.ClusterProfile{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: name}}
	for k, v := range props {
		cp.Status.Properties = append(cp.Status.Properties, inventoryv1alpha1.Property{Name: k, Value: v})
	}
	cp.Status.Conditions = conds
	return cp
}

func TestFromProfiles(t *testing.T) {
	addr := inventoryv1alpha1.PropertyMembershipAddress
	ms, skipped := FromProfiles([]*inventoryv1alpha1.ClusterProfile{
		profile("east", map[string]string{addr: "10.0.0.1:7402", "clusterset.k8s.io": "prod"}),
		profile("gen-4xk2", map[string]string{addr: "10.0.0.2:7402", "cluster.clusterset.k8s.io": "west",
			inventoryv1alpha1.PropertyMembershipServerName: "membership.west"}),
		profile("plain", map[string]string{}),
		profile("staging", map[string]string{addr: "10.0.0.3:7402", "clusterset.k8s.io": "staging"}),
		profile("unjoined", map[string]string{addr: "10.0.0.4:7402"}, metav1.Condition{Type: "Joined", Status: "False"}),
		profile("west", map[string]string{addr: "10.0.0.5:7402"}), // "west" is named by gen-4xk2 first
		profile("broken", map[string]string{addr: "no port"}),
	}, "prod")
	require.Equal(t, []Member{
		{Name: "east", Addr: "10.0.0.1:7402", ClusterSet: "prod"},
		{Name: "west", Addr: "10.0.0.2:7402", ServerName: "membership.west"},
	}, ms)
	reasons := map[string]string{}
	for _, s := range skipped {
		reasons[s.Profile] = s.Reason
	}
	require.Len(t, reasons, 5)
	require.Contains(t, reasons["fleet/plain"], "no membership.plexus.dev/address property")
	require.Contains(t, reasons["fleet/staging"], `clusterset "staging", not "prod"`)
	require.Contains(t, reasons["fleet/unjoined"], "Joined condition is False")
	require.Contains(t, reasons["fleet/west"], `already named by fleet/gen-4xk2`)
	require.Contains(t, reasons["fleet/broken"], "invalid")

	// Without a clusterset of its own, an importer takes every clusterset.
	ms, _ = FromProfiles([]*inventoryv1alpha1.ClusterProfile{profile("staging", map[string]string{addr: "10.0.0.3:7402", "clusterset.k8s.io": "staging"})}, "")
	require.Len(t, ms, 1)
}

func TestEditFileToNoMembersSaysSo(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	require.NoError(t, os.WriteFile(path, []byte("clusters: []\n"), 0o600), "a file to start from")
	require.NoError(t, EditFile(path, func(ms []Member) ([]Member, error) {
		return append(ms, Member{Name: "east", Addr: "x:1", ClusterSet: "prod"}), nil
	}))
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	ms, err := ParseFile(data)
	require.NoError(t, err)
	require.Equal(t, []Member{{Name: "east", Addr: "x:1", ClusterSet: "prod"}}, ms, "the clusterset is kept")

	require.NoError(t, EditFile(path, func([]Member) ([]Member, error) { return nil, nil }))
	data, err = os.ReadFile(path)
	require.NoError(t, err)
	require.Contains(t, string(data), "empty: true")
	ms, err = ParseFile(data)
	require.NoError(t, err)
	require.Empty(t, ms)
}

// A sources file's members of another clusterset are skipped, as
// ClusterProfiles of another clusterset are.
func TestFileSkipsOtherClusterSets(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	require.NoError(t, os.WriteFile(path, []byte("clusters:\n- {name: east, address: 'x:1', clusterset: prod}\n- {name: west, address: 'x:2', clusterset: staging}\n- {name: north, address: 'x:3'}\n"), 0o600))
	f := NewFile(path, 0, nil)
	f.ClusterSet = "prod"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan []Member, 1)
	go func() {
		_ = f.Run(ctx, func(ms []Member) {
			select {
			case got <- ms:
			default:
			}
		})
	}()
	var ms []Member
	select {
	case ms = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the file was not reported")
	}
	require.Equal(t, []string{"east", "north"}, names(ms))
}

func TestValidateAddr(t *testing.T) {
	for _, ok := range []string{"10.0.0.1:7402", "m.east.example:7402", "[fd00::1]:7402", "a:1,b:2", "dns:///m.east:7402", "dns://10.0.0.53/m.east:7402", "unix:///run/plexus.sock", "passthrough:///m:1"} {
		require.NoError(t, ValidateAddr(ok), ok)
	}
	for addr, want := range map[string]string{
		"http://127.0.0.1:7402": `"http" is not a gRPC target scheme`,
		"https://m:443":         `"https" is not a gRPC target scheme`,
		"127.0.0.1:99999":       "port must be a number from 1 to 65535",
		"127.0.0.1:0":           "port must be a number from 1 to 65535",
		"m:grpc":                "port must be a number from 1 to 65535",
		":7402":                 "no host",
		"a:1,b:70000":           `"b:70000": port must be`,
		"dns:///m.east":         "missing port",
		"dns:///m.east:99999":   "port must be",
		"127.0.0.1":             "missing port",
	} {
		err := ValidateAddr(addr)
		require.ErrorContains(t, err, want, addr)
	}
}

func FuzzValidateAddr(f *testing.F) {
	for _, s := range []string{"10.0.0.1:7402", "dns:///m:1", "http://x:1", "a:1,b:99999", "[::1]:1", "unix:///s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, addr string) {
		err := ValidateAddr(addr)
		if err != nil {
			if len(err.Error()) > 1000 {
				t.Fatalf("message of %d bytes", len(err.Error()))
			}
			return
		}
		if strings.Contains(addr, "://") {
			return
		}
		for _, a := range strings.Split(addr, ",") {
			_, port, err := net.SplitHostPort(a)
			if err != nil {
				t.Fatalf("accepted %q: %v", addr, err)
			}
			if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
				t.Fatalf("accepted port %q of %q", port, addr)
			}
		}
	})
}

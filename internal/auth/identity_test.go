package auth

import (
	"context"
	"strings"
	"testing"
)

func TestParseIdentity(t *testing.T) {
	cases := []struct {
		principal string
		want      Identity
		ok        bool
	}{
		{"spiffe://plexus.local/clusterset/cs1/cluster/east/membership",
			Identity{TrustDomain: "plexus.local", Clusterset: "cs1", Cluster: "east", Service: "membership"}, true},
		{"spiffe://plexus.local/clusterset/cs1/fleet/repair",
			Identity{TrustDomain: "plexus.local", Clusterset: "cs1", Service: "repair"}, true},
		{"spiffe://plexus.local/importer",
			Identity{TrustDomain: "plexus.local", Service: "importer", Shared: true}, true},
		{"repair", Identity{Service: "repair", Shared: true}, true},
		{"", Identity{}, false},
		{"spiffe://plexus.local/clusterset/cs1/cluster/East/membership", Identity{TrustDomain: "plexus.local"}, false},
		{"spiffe://plexus.local/clusterset/cs1/cluster//membership", Identity{TrustDomain: "plexus.local"}, false},
		{"spiffe://plexus.local/clusterset/cs1/cluster/east/membership/x", Identity{TrustDomain: "plexus.local"}, false},
		{"spiffe://plexus.local/clusterset/cs1/other/east/membership", Identity{TrustDomain: "plexus.local"}, false},
		{"spiffe://plexus.local/cluster/east/membership", Identity{TrustDomain: "plexus.local"}, false},
		{"spiffe:///membership", Identity{}, false},
	}
	for _, c := range cases {
		got, ok := ParseIdentity(c.principal)
		c.want.Principal = c.principal
		if got != c.want || ok != c.ok {
			t.Errorf("ParseIdentity(%q) = %+v, %v; want %+v, %v", c.principal, got, ok, c.want, c.ok)
		}
	}
}

func TestPrincipalsRoundTrip(t *testing.T) {
	id, ok := ParseIdentity(ClusterPrincipal("td.example", "prod", "c-1", "importer"))
	if !ok || id.Clusterset != "prod" || id.Cluster != "c-1" || id.Service != "importer" || id.Fleet() || id.Shared {
		t.Fatalf("cluster principal read back as %+v, %v", id, ok)
	}
	id, ok = ParseIdentity(FleetPrincipal("td.example", "prod", "repair"))
	if !ok || id.Clusterset != "prod" || id.Cluster != "" || !id.Fleet() || id.Shared {
		t.Fatalf("fleet principal read back as %+v, %v", id, ok)
	}
	if _, ok := IdentityFrom(context.Background()); ok {
		t.Fatal("an anonymous caller has an identity")
	}
	id, ok = IdentityFrom(WithPrincipal(context.Background(), ClusterPrincipal("td", "cs", "a", "repair")))
	if !ok || id.Cluster != "a" {
		t.Fatalf("IdentityFrom = %+v, %v", id, ok)
	}
}

func FuzzParseIdentity(f *testing.F) {
	f.Add("spiffe://plexus.local/clusterset/cs1/cluster/east/membership")
	f.Add("spiffe://plexus.local/clusterset/cs1/fleet/repair")
	f.Add("spiffe://plexus.local/importer")
	f.Add("operator")
	f.Fuzz(func(t *testing.T, p string) {
		id, ok := ParseIdentity(p)
		if id.Principal != p {
			t.Fatalf("principal %q kept as %q", p, id.Principal)
		}
		if !ok {
			return
		}
		if id.Cluster != "" && (id.Clusterset == "" || id.Shared) {
			t.Fatalf("%q: cluster without clusterset, or shared: %+v", p, id)
		}
		if id.Shared && id.Clusterset != "" {
			t.Fatalf("%q: shared identity with a clusterset: %+v", p, id)
		}
		if !id.Shared {
			var again string
			if id.Cluster != "" {
				again = ClusterPrincipal(id.TrustDomain, id.Clusterset, id.Cluster, id.Service)
			} else {
				again = FleetPrincipal(id.TrustDomain, id.Clusterset, id.Service)
			}
			if again != p {
				t.Fatalf("%q rebuilt as %q", p, again)
			}
		}
		if strings.HasPrefix(p, "spiffe://") && id.Shared && strings.Count(p, "/") != 3 {
			t.Fatalf("%q read as shared", p)
		}
	})
}

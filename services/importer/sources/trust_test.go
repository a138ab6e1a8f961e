package sources_test

import (
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/plexusnet/plexus/internal/auth"
	"github.com/plexusnet/plexus/internal/testing/servertest"
	"github.com/plexusnet/plexus/internal/testing/testcerts"
	"github.com/plexusnet/plexus/services/importer/exports"
	"github.com/plexusnet/plexus/services/importer/sources"
	"github.com/plexusnet/plexus/services/importer/sourcetest"
)

func TestTrustCheck(t *testing.T) {
	east := auth.ClusterPrincipal("plexus.test", "cs1", "east", "membership")
	cases := []struct {
		name      string
		trust     sources.Trust
		principal string
		want      string // a reason; empty: accepted
	}{
		{name: "own cluster", principal: east},
		{name: "own cluster and clusterset", trust: sources.Trust{Clusterset: "cs1", RequireClusterIdentities: true}, principal: east},
		{name: "another cluster", principal: auth.ClusterPrincipal("plexus.test", "cs1", "west", "membership"), want: sources.RefusedIdentityCluster},
		{name: "another clusterset", trust: sources.Trust{Clusterset: "cs2"}, principal: east, want: sources.RefusedIdentityClusterset},
		{name: "clusterset unknown here", principal: auth.ClusterPrincipal("plexus.test", "cs2", "east", "membership")},
		{name: "another service", principal: auth.ClusterPrincipal("plexus.test", "cs1", "east", "importer"), want: sources.RefusedIdentityService},
		{name: "shared", principal: "spiffe://plexus.test/membership"},
		{name: "shared, required", trust: sources.Trust{RequireClusterIdentities: true}, principal: "spiffe://plexus.test/membership", want: sources.RefusedIdentityRequired},
		{name: "fleet", principal: auth.FleetPrincipal("plexus.test", "cs1", "membership")},
		{name: "fleet, required", trust: sources.Trust{RequireClusterIdentities: true}, principal: auth.FleetPrincipal("plexus.test", "cs1", "membership"), want: sources.RefusedIdentityRequired},
		{name: "common name", principal: "membership.east"},
		{name: "unknown SPIFFE shape", principal: "spiffe://plexus.test/ns/x/sa/y"},
		{name: "unknown SPIFFE shape, required", trust: sources.Trust{RequireClusterIdentities: true}, principal: "spiffe://plexus.test/ns/x/sa/y", want: sources.RefusedIdentityRequired},
		{name: "no certificate", principal: ""},
		{name: "no certificate, required", trust: sources.Trust{RequireClusterIdentities: true}, want: sources.RefusedIdentityRequired},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.trust.Check("east", tc.principal)
			if tc.want == "" {
				require.Nil(t, r)
				return
			}
			require.NotNil(t, r)
			require.Equal(t, tc.want, r.Reason)
			require.Equal(t, tc.principal, r.Identity)
		})
	}
}

// refusals records what OnRefused was told.
type refusals struct {
	mu  sync.Mutex
	got []sources.Refusal
}

func (r *refusals) add(x sources.Refusal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, x)
}

func (r *refusals) list() []sources.Refusal {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]sources.Refusal(nil), r.got...)
}

// trustProbe follows a source with OnRefused, its own metrics and a log.
type trustProbe struct {
	src      *sources.Source
	refused  *refusals
	registry *prometheus.Registry
	logs     *servertest.Buffer
}

func followChecked(t *testing.T, name, addr string, store *exports.Store, configure func(*sources.Config)) *trustProbe {
	t.Helper()
	p := &trustProbe{refused: &refusals{}, registry: prometheus.NewRegistry(), logs: &servertest.Buffer{}}
	m, err := sources.NewMetrics(p.registry)
	require.NoError(t, err)
	p.src = followWith(t, name, addr, store, func(c *sources.Config) {
		c.Metrics, c.OnRefused = m, p.refused.add
		c.Logger = slog.New(slog.NewTextHandler(p.logs, nil))
		configure(c)
	})
	return p
}

func (p *trustProbe) count(t *testing.T, source, reason string) float64 {
	t.Helper()
	mfs, err := p.registry.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "plexus_importer_source_refusals_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["source"] == source && labels["reason"] == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// Two sources that reach one membership under two names: the one whose
// name is not the membership's cluster is refused, and imports nothing.
func TestSourceOfAnotherClusterIsRefused(t *testing.T) {
	fake := sourcetest.Start(t, "east")
	fake.Set(sourcetest.Endpoints("shop", "cart", []string{"http=8080"}, "10.0.0.1"))
	store := exports.New(nil)
	store.AddSource("east")
	store.AddSource("east-again")
	follow(t, "east", fake.Addr(), store)
	p := followChecked(t, "east-again", fake.Addr(), store, func(*sources.Config) {})

	require.Eventually(t, func() bool { return p.count(t, "east-again", sources.RefusedServesOther) >= 2 }, wait, tick, "refused, and refused again on retry")
	require.Eventually(t, func() bool { st, _ := store.Source("east"); return st.Synced }, wait, tick)
	require.Equal(t, 1, store.Exported("east"))
	require.Zero(t, store.Exported("east-again"), "nothing the refused source sent is taken")
	st, _ := store.Source("east-again")
	require.False(t, st.Connected)
	require.False(t, st.Synced)
	r := p.src.Refusal()
	require.NotNil(t, r)
	require.Equal(t, sources.RefusedServesOther, r.Reason)
	require.Contains(t, r.Detail, "serves cluster east, not east-again")
	require.Len(t, p.refused.list(), 1, "a refusal that repeats is reported once")
	require.Equal(t, 1, strings.Count(p.logs.String(), `level=INFO msg="source refused"`))
	require.Contains(t, p.logs.String(), `source=east-again addr=`+fake.Addr()+` identity="" reason=SERVES_OTHER_CLUSTER`)
	require.NotContains(t, p.logs.String(), "level=WARN")
}

// A membership that passes on an export naming another cluster is
// refused at that export; what it said before stays, the export does not
// land.
func TestExportOfAnotherClusterIsRefused(t *testing.T) {
	fake := sourcetest.Start(t, "east")
	fake.Set(sourcetest.Endpoints("shop", "cart", []string{"http=8080"}, "10.0.0.1"))
	store := exports.New(nil)
	store.AddSource("east")
	p := followChecked(t, "east", fake.Addr(), store, func(*sources.Config) {})
	require.Eventually(t, func() bool { st, _ := store.Source("east"); return st.Synced && st.Connected }, wait, tick)
	require.Nil(t, p.src.Refusal())

	foreign := sourcetest.Endpoints("shop", "web", []string{"http=8080"}, "10.1.0.1")
	foreign.Cluster = "west"
	fake.Set(foreign)
	require.Eventually(t, func() bool { return p.count(t, "east", sources.RefusedExportCluster) >= 1 }, wait, tick)
	require.Equal(t, 1, store.Exported("east"), "the foreign export is not taken")
	_, ok := store.Get(exports.Key{Namespace: "shop", Name: "web"})
	require.False(t, ok)
	require.Equal(t, sources.RefusedExportCluster, p.src.Refusal().Reason)
	require.Contains(t, p.src.Refusal().Detail, "namespaces/shop/services/web names cluster west, not east")

	// Once the membership stops passing it on, the source is taken again.
	fake.Delete(foreign.GetService())
	require.Eventually(t, func() bool { return p.src.Refusal() == nil }, wait, tick)
	require.Eventually(t, func() bool { st, _ := store.Source("east"); return st.Connected }, wait, tick)
}

// With TLS the membership's certificate must not name another cluster;
// a shared identity is accepted until cluster identities are required.
func TestMembershipCertificateIdentity(t *testing.T) {
	ca := testcerts.NewCA(t, "fleet")
	issue := func(name, principal string) *sourcetest.Source {
		leaf := testcerts.Loopback(name)
		leaf.URIs = []string{principal}
		cert, key := ca.Issue(name, leaf)
		fake := sourcetest.StartTLS(t, "east", cert, key)
		fake.Set(sourcetest.Endpoints("shop", "cart", []string{"http=8080"}, "10.0.0.1"))
		return fake
	}
	creds, err := credentials.NewClientTLSFromFile(ca.File, "localhost")
	require.NoError(t, err)
	tlsConn := func(addr string) func(*sources.Config) {
		return func(c *sources.Config) {
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
			require.NoError(t, err)
			t.Cleanup(func() { conn.Close() })
			c.Conn = conn
		}
	}
	run := func(fake *sourcetest.Source, trust sources.Trust) (*trustProbe, *exports.Store) {
		store := exports.New(nil)
		store.AddSource("east")
		return followChecked(t, "east", fake.Addr(), store, func(c *sources.Config) {
			tlsConn(fake.Addr())(c)
			c.Trust = trust
		}), store
	}

	ownID := auth.ClusterPrincipal("plexus.test", "cs1", "east", "membership")
	own, store := run(issue("own", ownID), sources.Trust{Clusterset: "cs1", RequireClusterIdentities: true})
	require.Eventually(t, func() bool { return store.Exported("east") == 1 }, wait, tick)
	require.Equal(t, ownID, own.src.Identity())
	require.Nil(t, own.src.Refusal())

	westID := auth.ClusterPrincipal("plexus.test", "cs1", "west", "membership")
	west, store := run(issue("west", westID), sources.Trust{})
	require.Eventually(t, func() bool { return west.count(t, "east", sources.RefusedIdentityCluster) >= 1 }, wait, tick)
	require.Zero(t, store.Exported("east"))
	require.Equal(t, westID, west.src.Refusal().Identity)
	require.Contains(t, west.logs.String(), `identity=`+westID+` reason=IDENTITY_CLUSTER_MISMATCH`)
	require.Equal(t, []sources.Refusal{*west.src.Refusal()}, west.refused.list())

	shared := issue("shared", "spiffe://plexus.test/membership")
	legacy, store := run(shared, sources.Trust{Clusterset: "cs1"})
	require.Eventually(t, func() bool { return store.Exported("east") == 1 }, wait, tick, "a shared identity is accepted during the migration")
	require.Nil(t, legacy.src.Refusal())
	strict, store := run(shared, sources.Trust{Clusterset: "cs1", RequireClusterIdentities: true})
	require.Eventually(t, func() bool { return strict.count(t, "east", sources.RefusedIdentityRequired) >= 1 }, wait, tick)
	require.Zero(t, store.Exported("east"))
	require.Zero(t, testutil.CollectAndCount(strict.registry, "plexus_importer_source_connected"), "a refused stream never counts as up")
}

package decide_test

import (
	"net/netip"
	"time"

	"github.com/plexusnet/plexus/services/repair/decide"
)

// t0 is the time of the passes unless a test moves the clock.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// old is a creation time well past the default grace.
var old = t0.Add(-time.Hour)

func pod(name, uid string) decide.Owner {
	return decide.Owner{Cluster: "a", Kind: "Pod", Namespace: "default", Name: name, UID: uid}
}

func workload(name, uid string) decide.Owner {
	return decide.Owner{Cluster: "a", Kind: "ExternalWorkload", Namespace: "default", Name: name, UID: uid}
}

func alloc(pool, addr string, o decide.Owner, etag string, created time.Time) decide.Allocation {
	return decide.Allocation{Pool: pool, Address: netip.MustParseAddr(addr), Owner: o, Etag: etag, CreateTime: created}
}

func pool(id string, cidrs ...string) decide.Pool {
	p := decide.Pool{ID: id}
	for _, c := range cidrs {
		p.CIDRs = append(p.CIDRs, netip.MustParsePrefix(c))
	}
	return p
}

func config() decide.Config {
	c := decide.DefaultConfig()
	c.Resolvable = []decide.Scope{
		{Kind: "Pod", Cluster: "a"},
		{Kind: "ExternalWorkload", Cluster: "a"},
		{Kind: "ClusterSetService", Cluster: ""},
	}
	return c
}

func view(owners ...decide.Owner) *decide.Snapshot {
	s := decide.NewSnapshot(len(owners))
	for _, o := range owners {
		s.AddOwner(o)
	}
	return s
}

// input is a synced, real pass at t0 over the pool "p" (10.0.0.0/24).
func input(v *decide.Snapshot, allocs ...decide.Allocation) decide.Input {
	return decide.Input{
		Now:         t0,
		Pools:       []decide.Pool{pool("p", "10.0.0.0/24")},
		Allocations: allocs,
		Owners:      v,
		Synced:      true,
		Config:      config(),
	}
}

// passes runs n passes of in, carrying the strikes, and returns the last.
func passes(n int, in decide.Input) (decide.Output, error) {
	var out decide.Output
	var err error
	for range n {
		out, err = decide.Decide(in)
		if err != nil {
			return out, err
		}
		in.Strikes = out.Strikes
	}
	return out, nil
}

// brief is the part of a finding a table compares.
type brief struct {
	Kind    decide.Kind
	At      string // address, namespace/name of a slice, or pool
	Action  decide.Action
	Strikes int
}

func briefs(fs []decide.Finding) []brief {
	var out []brief
	for _, f := range fs {
		at := f.Address.String()
		switch f.Kind {
		case decide.KindOrphanedSlice:
			at = f.Slice.Namespace + "/" + f.Slice.Name
		case decide.KindStalledDeletion:
			at = f.Pool
		}
		out = append(out, brief{Kind: f.Kind, At: at, Action: f.Action, Strikes: f.Strikes})
	}
	return out
}

func releasedAddrs(rs []decide.Release) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Address.String())
	}
	return out
}

func findingAt(fs []decide.Finding, kind decide.Kind, addr string) (decide.Finding, bool) {
	for _, f := range fs {
		if f.Kind == kind && f.Address.String() == addr {
			return f, true
		}
	}
	return decide.Finding{}, false
}

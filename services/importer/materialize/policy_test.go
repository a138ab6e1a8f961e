package materialize

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	discovery "k8s.io/api/discovery/v1"

	"github.com/plexusnet/plexus/internal/exportpolicy"
)

func TestAdmit(t *testing.T) {
	policy, err := exportpolicy.Parse([]byte(`{"metadata":{"name":"clusterset"},"spec":{"rules":[
		{"namespace":"shop","exportFrom":["a","b"],"importTo":["a","c"]},
		{"namespace":"vault","importTo":[]}]}}`))
	require.NoError(t, err)
	slice := []*discovery.EndpointSlice{{}}
	view := func(ns, local string) View {
		return View{Namespace: ns, Name: "web", LocalCluster: local,
			Exports: []Export{export("a", time.Hour, 80), export("b", time.Hour, 80), export("x", time.Hour, 80)},
			Slices:  map[string][]*discovery.EndpointSlice{"a": slice, "gone": slice}}
	}
	for _, tc := range []struct {
		name       string
		policy     *exportpolicy.Policy
		ns, local  string
		kept       []string
		refused    []string
		refusedWhy string
	}{
		{"no policy keeps everything", nil, "shop", "b", []string{"a", "b", "x"}, nil, ""},
		{"no rule keeps everything", policy, "other", "b", []string{"a", "b", "x"}, nil, ""},
		{"unlisted exporter is kept out", policy, "shop", "c", []string{"a", "b"}, []string{"x"}, exportpolicy.ReasonExportNotPermitted},
		{"outside the import set: everything goes, slices of silent clusters too", policy, "shop", "b", nil,
			[]string{"a", "b", "gone", "x"}, exportpolicy.ReasonImportNotPermitted},
		{"an empty import set imports nowhere", policy, "vault", "a", nil, []string{"a", "b", "gone", "x"}, exportpolicy.ReasonImportNotPermitted},
		{"an invalid policy refuses all", exportpolicy.Invalid("1", exportpolicy.ErrInvalid), "shop", "a", nil,
			[]string{"a", "b", "gone", "x"}, exportpolicy.ReasonImportNotPermitted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Admit(view(tc.ns, tc.local), tc.policy)
			var kept []string
			for _, e := range v.Exports {
				kept = append(kept, e.Cluster)
			}
			require.Equal(t, tc.kept, kept)
			require.Equal(t, tc.refused, slices.Sorted(maps.Keys(v.Refused)))
			for _, d := range v.Refused {
				require.False(t, d.Allowed)
				require.Equal(t, tc.refusedWhy, d.Reason)
			}
			if len(tc.kept) == 0 {
				require.Equal(t, Withdrawn, Decide(v).Verdict, "nothing admitted: the import is withdrawn")
				rm := Remove(v, func(cl string) bool { _, ok := v.Refused[cl]; return ok })
				require.False(t, rm.Blocked, "the policy's word is final for every cluster with slices")
			}
		})
	}
}

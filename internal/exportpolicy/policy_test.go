package exportpolicy

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const fleetPolicy = `{
  "apiVersion": "policy.plexus.dev/v1alpha1", "kind": "ClusterSetPolicy",
  "metadata": {"name": "clusterset", "resourceVersion": "7"},
  "spec": {"rules": [
    {"namespace": "*", "exportFrom": ["east", "west"]},
    {"namespace": "team-*", "importTo": ["east"]},
    {"namespace": "team-payments-*", "exportFrom": ["*"], "importTo": ["west", "north"]},
    {"namespace": "payments", "exportFrom": ["east"], "importTo": ["east", "west"]},
    {"namespace": "vault", "exportFrom": [], "importTo": []},
    {"namespace": "open"}
  ]}
}`

func TestDecisions(t *testing.T) {
	p, err := Parse([]byte(fleetPolicy))
	require.NoError(t, err)
	require.Equal(t, "7", p.Version)
	for _, tc := range []struct {
		name, ns, cluster string
		export, imp       bool
		rule              string
	}{
		{"exact rule, listed exporter", "payments", "east", true, true, `spec.rules[3] (namespace "payments")`},
		{"exact rule, unlisted exporter", "payments", "west", false, true, `spec.rules[3]`},
		{"exact rule, outside the import set", "payments", "north", false, false, `spec.rules[3]`},
		{"exact rule beats every prefix", "payments", "south", false, false, `spec.rules[3]`},
		{"longer prefix beats shorter", "team-payments-eu", "north", true, true, `spec.rules[2]`},
		{"prefix, exporters default to all", "team-a", "north", true, false, `spec.rules[1]`},
		{"prefix, importer listed", "team-a", "east", true, true, `spec.rules[1]`},
		{"star catches the rest", "shop", "north", false, true, `spec.rules[0]`},
		{"star, listed", "shop", "west", true, true, `spec.rules[0]`},
		{"empty lists refuse everyone", "vault", "east", false, false, `spec.rules[4]`},
		{"a rule without lists allows all", "open", "north", true, true, `spec.rules[5]`},
		{"prefix is not a name", "team-", "north", true, false, `spec.rules[1]`},
		{"no id matches no list", "payments", "", false, false, `spec.rules[3]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, i := p.MayExport(tc.ns, tc.cluster), p.MayImport(tc.ns, tc.cluster)
			require.Equal(t, tc.export, e.Allowed, "export: %+v", e)
			require.Equal(t, tc.imp, i.Allowed, "import: %+v", i)
			require.Contains(t, e.Rule, tc.rule)
			require.Contains(t, i.Rule, tc.rule)
			if !e.Allowed {
				require.Equal(t, ReasonExportNotPermitted, e.Reason)
				require.Contains(t, e.Message, tc.rule)
				require.Contains(t, e.Message, "namespace "+tc.ns)
			}
			if !i.Allowed {
				require.Equal(t, ReasonImportNotPermitted, i.Reason)
			}
		})
	}
}

func TestNoPolicyAndNoMatchAllowEverything(t *testing.T) {
	var none *Policy
	require.True(t, none.MayExport("any", "c").Allowed)
	require.True(t, none.MayImport("any", "c").Allowed)
	require.NoError(t, none.Err())

	p, err := Parse([]byte(`{"metadata":{"name":"clusterset"},"spec":{"rules":[{"namespace":"payments","exportFrom":["east"]}]}}`))
	require.NoError(t, err)
	d := p.MayExport("shop", "west")
	require.True(t, d.Allowed)
	require.Empty(t, d.Rule, "no rule matched: the default decides")

	empty, err := Parse([]byte(`{"metadata":{"name":"clusterset"},"spec":{}}`))
	require.NoError(t, err)
	require.True(t, empty.MayImport("x", "y").Allowed)
}

func TestInvalidPolicyRefusesEverything(t *testing.T) {
	_, err := Parse([]byte(`{"metadata":{"name":"clusterset"},"spec":{"rules":[{"namespace":"Bad_NS"}]}}`))
	require.ErrorIs(t, err, ErrInvalid)
	p := Invalid("9", err)
	require.Equal(t, err, p.Err())
	for _, d := range []Decision{p.MayExport("x", "a"), p.MayImport("x", "a")} {
		require.False(t, d.Allowed)
		require.Contains(t, d.Message, "spec.rules[0].namespace")
	}
}

func TestParseNamesTheBadEntry(t *testing.T) {
	many := `{"metadata":{"name":"clusterset"},"spec":{"rules":[` + strings.Repeat(`{"namespace":"a","exportFrom":["x"]},`, 300) + `{"namespace":"b"}]}}`
	for _, tc := range []struct{ name, in, field string }{
		{"not json", `{`, "(object)"},
		{"wrong name", `{"metadata":{"name":"other"},"spec":{}}`, "metadata.name"},
		{"bad namespace", `{"metadata":{"name":"clusterset"},"spec":{"rules":[{"namespace":"a"},{"namespace":"-x"}]}}`, "spec.rules[1].namespace"},
		{"empty namespace", `{"metadata":{"name":"clusterset"},"spec":{"rules":[{"namespace":""}]}}`, "spec.rules[0].namespace"},
		{"star inside", `{"metadata":{"name":"clusterset"},"spec":{"rules":[{"namespace":"a*b"}]}}`, "spec.rules[0].namespace"},
		{"prefix from a dash", `{"metadata":{"name":"clusterset"},"spec":{"rules":[{"namespace":"-*"}]}}`, "spec.rules[0].namespace"},
		{"duplicate pattern", `{"metadata":{"name":"clusterset"},"spec":{"rules":[{"namespace":"a"},{"namespace":"a"}]}}`, "spec.rules[1].namespace"},
		{"bad cluster", `{"metadata":{"name":"clusterset"},"spec":{"rules":[{"namespace":"a","importTo":["ok","Not OK"]}]}}`, "spec.rules[0].importTo[1]"},
		{"duplicate cluster", `{"metadata":{"name":"clusterset"},"spec":{"rules":[{"namespace":"a","exportFrom":["x","x"]}]}}`, "spec.rules[0].exportFrom[1]"},
		{"too many rules", many, "spec.rules"},
		{"too large", `{"metadata":{"name":"clusterset"},"x":"` + strings.Repeat("a", MaxBytes) + `"}`, "(object)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse([]byte(tc.in))
			require.Nil(t, p)
			var ie *InvalidError
			require.True(t, errors.As(err, &ie), "%v", err)
			require.Equal(t, tc.field, ie.Problems[0].Field, "%v", err)
			require.LessOrEqual(t, len(err.Error()), maxErrorLen)
		})
	}
}

func TestTooManyClusters(t *testing.T) {
	names := make([]string, 0, 300)
	for i := range 300 {
		names = append(names, `"c`+strings.Repeat("x", i%50)+string(rune('a'+i%26))+`"`)
	}
	_, err := Parse([]byte(`{"metadata":{"name":"clusterset"},"spec":{"rules":[{"namespace":"a","exportFrom":[` + strings.Join(names, ",") + `]}]}}`))
	var ie *InvalidError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, "spec.rules[0].exportFrom", ie.Problems[0].Field)
}

func TestErrorListIsBounded(t *testing.T) {
	in := `{"metadata":{"name":"clusterset"},"spec":{"rules":[` + strings.Repeat(`{"namespace":"BAD"},`, 40) + `{"namespace":"ok"}]}}`
	_, err := Parse([]byte(in))
	var ie *InvalidError
	require.ErrorAs(t, err, &ie)
	require.Len(t, ie.Problems, maxProblems)
	require.Equal(t, 40-maxProblems, ie.More)
	require.Contains(t, err.Error(), "and 32 more")
}

func TestRuleOrderDoesNotMatter(t *testing.T) {
	a := `{"metadata":{"name":"clusterset"},"spec":{"rules":[{"namespace":"*","exportFrom":["x"]},{"namespace":"t-*","exportFrom":["y"]},{"namespace":"t-a","exportFrom":["z"]}]}}`
	b := `{"metadata":{"name":"clusterset"},"spec":{"rules":[{"namespace":"t-a","exportFrom":["z"]},{"namespace":"*","exportFrom":["x"]},{"namespace":"t-*","exportFrom":["y"]}]}}`
	pa, err := Parse([]byte(a))
	require.NoError(t, err)
	pb, err := Parse([]byte(b))
	require.NoError(t, err)
	for _, ns := range []string{"t-a", "t-b", "other", "t-"} {
		for _, cl := range []string{"x", "y", "z"} {
			require.Equal(t, pa.MayExport(ns, cl).Allowed, pb.MayExport(ns, cl).Allowed, "%s %s", ns, cl)
		}
	}
}

// FuzzParse checks that no input makes Parse panic, that its errors stay
// bounded and name an entry, and that a policy it accepts answers every
// question without a panic and refuses only with a reason.
func FuzzParse(f *testing.F) {
	f.Add([]byte(fleetPolicy))
	f.Add([]byte(`{"metadata":{"name":"clusterset"},"spec":{"rules":[{"namespace":"a*","exportFrom":[]}]}}`))
	f.Add([]byte(`{"metadata":{"name":"clusterset"},"spec":{"rules":[{"namespace":"*","importTo":["*"]}]}}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data)
		if err != nil {
			var ie *InvalidError
			if !errors.As(err, &ie) || len(ie.Problems) == 0 {
				t.Fatalf("error without a named entry: %v", err)
			}
			if len(err.Error()) > maxErrorLen {
				t.Fatalf("error of %d bytes", len(err.Error()))
			}
			p = Invalid("", err)
		}
		for _, ns := range []string{"a", "team-a", "payments", ""} {
			for _, d := range []Decision{p.MayExport(ns, "east"), p.MayImport(ns, "east")} {
				if !d.Allowed && (d.Reason == "" || d.Message == "" || d.Rule == "") {
					t.Fatalf("refusal without a reason: %+v", d)
				}
				if d.Allowed && d.Reason != "" {
					t.Fatalf("allowed with a reason: %+v", d)
				}
			}
		}
	})
}

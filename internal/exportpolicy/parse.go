package exportpolicy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	policyv1alpha1 "github.com/plexusnet/plexus/api/policy/v1alpha1"
)

// MaxBytes bounds the size of a policy object Parse accepts.
const MaxBytes = 1 << 20

// maxProblems bounds the problems a parse error lists; maxErrorLen the
// length of its message.
const (
	maxProblems = 8
	maxErrorLen = 2048
)

// ErrInvalid marks a policy that does not parse; errors.Is finds it in the
// error Parse returns.
var ErrInvalid = errors.New("invalid clusterset policy")

// Problem is one bad entry of a policy, named by its field path.
type Problem struct {
	// Field is the entry's path, for example spec.rules[2].exportFrom[0].
	Field string
	// Detail says what is wrong with it.
	Detail string
}

// InvalidError lists the bad entries of a policy (the first maxProblems).
type InvalidError struct {
	Problems []Problem
	// More counts the problems left out.
	More int
}

func (e *InvalidError) Error() string {
	var b strings.Builder
	b.WriteString(ErrInvalid.Error())
	for i, p := range e.Problems {
		sep := ": "
		if i > 0 {
			sep = "; "
		}
		b.WriteString(sep + p.Field + ": " + p.Detail)
	}
	if e.More > 0 {
		fmt.Fprintf(&b, "; and %d more", e.More)
	}
	return clip(b.String(), maxErrorLen)
}

// Unwrap makes errors.Is(err, ErrInvalid) hold.
func (e *InvalidError) Unwrap() error { return ErrInvalid }

func (e *InvalidError) add(field, format string, args ...any) {
	if len(e.Problems) >= maxProblems {
		e.More++
		return
	}
	e.Problems = append(e.Problems, Problem{Field: field, Detail: clip(fmt.Sprintf(format, args...), 200)})
}

// Parse reads a ClusterSetPolicy as JSON (the object as the API server
// serves it) and checks every entry. A policy with a bad entry is refused
// whole, with an *InvalidError naming the entries; use Invalid to turn it
// into a Policy that refuses everything.
func Parse(data []byte) (*Policy, error) {
	if len(data) > MaxBytes {
		return nil, &InvalidError{Problems: []Problem{{Field: "(object)", Detail: fmt.Sprintf("%d bytes, more than the %d a policy may have", len(data), MaxBytes)}}}
	}
	var obj policyv1alpha1.ClusterSetPolicy
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&obj); err != nil {
		return nil, &InvalidError{Problems: []Problem{{Field: "(object)", Detail: clip("not a ClusterSetPolicy: "+err.Error(), 200)}}}
	}
	return FromObject(&obj)
}

// FromObject checks a decoded ClusterSetPolicy and compiles it.
func FromObject(obj *policyv1alpha1.ClusterSetPolicy) (*Policy, error) {
	bad := &InvalidError{}
	if obj.Name != policyv1alpha1.PolicyName {
		bad.add("metadata.name", "%q: the clusterset policy is named %s", clip(obj.Name, 64), policyv1alpha1.PolicyName)
	}
	rules := obj.Spec.Rules
	if len(rules) > policyv1alpha1.MaxRules {
		bad.add("spec.rules", "%d rules, more than %d", len(rules), policyv1alpha1.MaxRules)
		rules = rules[:policyv1alpha1.MaxRules]
	}
	p := &Policy{Version: obj.ResourceVersion}
	seen := map[string]int{}
	for i, r := range rules {
		field := fmt.Sprintf("spec.rules[%d]", i)
		pat, ok := parsePattern(r.Namespace)
		if !ok {
			bad.add(field+".namespace", "%q is not a namespace name, a prefix ending in *, or *", clip(r.Namespace, 64))
			continue
		}
		if j, dup := seen[r.Namespace]; dup {
			bad.add(field+".namespace", "%q is the namespace of spec.rules[%d] too", r.Namespace, j)
			continue
		}
		seen[r.Namespace] = i
		c := compiled{index: i, pattern: pat}
		c.export = parseClusters(bad, field+".exportFrom", r.ExportFrom)
		c.imports = parseClusters(bad, field+".importTo", r.ImportTo)
		p.rules = append(p.rules, c)
	}
	if len(bad.Problems) > 0 {
		return nil, bad
	}
	return p, nil
}

// parsePattern reads a rule's namespace: "*", a prefix ending in "*", or
// a namespace name (a DNS-1123 label).
func parsePattern(s string) (pattern, bool) {
	if s == "*" {
		return pattern{raw: s, prefix: true}, true
	}
	if p, ok := strings.CutSuffix(s, "*"); ok {
		// A prefix of a label: it may end in '-', not start with one.
		return pattern{raw: s, text: p, prefix: true}, len(p) <= 62 && p != "" && labelChars(p) && p[0] != '-'
	}
	return pattern{raw: s, text: s}, isLabel(s)
}

// parseClusters reads a rule's list of clusters: nil is every cluster.
func parseClusters(bad *InvalidError, field string, list *[]string) clusters {
	if list == nil {
		return clusters{all: true}
	}
	if len(*list) > policyv1alpha1.MaxClusters {
		bad.add(field, "%d clusters, more than %d", len(*list), policyv1alpha1.MaxClusters)
		return clusters{}
	}
	out := clusters{names: make(map[string]bool, len(*list))}
	for j, name := range *list {
		switch {
		case name == "*":
			out.all = true
		case !isLabel(name):
			bad.add(fmt.Sprintf("%s[%d]", field, j), "%q is not a cluster id (a DNS label) or *", clip(name, 64))
		case out.names[name]:
			bad.add(fmt.Sprintf("%s[%d]", field, j), "%q is listed twice", name)
		default:
			out.names[name] = true
		}
	}
	return out
}

// isLabel reports whether s is a DNS-1123 label, as namespace names and
// cluster ids are.
func isLabel(s string) bool {
	return len(s) > 0 && len(s) <= 63 && labelChars(s) && s[0] != '-' && s[len(s)-1] != '-'
}

func labelChars(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// clip cuts s to at most n bytes, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

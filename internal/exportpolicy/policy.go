package exportpolicy

import (
	"fmt"
	"sort"
	"strings"
)

// Reasons of a refusal, as the ServiceExport's Valid condition and the
// importer's logs carry them.
const (
	// ReasonExportNotPermitted: the policy does not let the cluster export
	// the namespace's services.
	ReasonExportNotPermitted = "ExportNotPermitted"
	// ReasonImportNotPermitted: the policy does not let the cluster import
	// the namespace's services.
	ReasonImportNotPermitted = "ImportNotPermitted"
)

// Policy is a parsed clusterset policy. A nil *Policy is no policy: it
// permits everything.
type Policy struct {
	// Version is the resourceVersion of the object it was parsed from.
	Version string
	// rules are sorted as Parse read them; match picks the closest.
	rules []compiled
	// invalid, when set, refuses everything with this error.
	invalid error
}

// Invalid returns a Policy that refuses every export and import and names
// err (Parse's error) as the reason.
func Invalid(version string, err error) *Policy {
	return &Policy{Version: version, invalid: err}
}

// Err returns the error of an invalid policy, nil otherwise.
func (p *Policy) Err() error {
	if p == nil {
		return nil
	}
	return p.invalid
}

type pattern struct {
	raw    string
	text   string
	prefix bool
}

func (p pattern) matches(ns string) bool {
	if p.prefix {
		return strings.HasPrefix(ns, p.text)
	}
	return ns == p.text
}

// closer reports whether p is a closer match than q: an exact name before
// any prefix, a longer prefix before a shorter one.
func (p pattern) closer(q pattern) bool {
	if p.prefix != q.prefix {
		return !p.prefix
	}
	return len(p.text) > len(q.text)
}

type clusters struct {
	all   bool
	names map[string]bool
}

func (c clusters) has(cluster string) bool { return c.all || c.names[cluster] }

func (c clusters) String() string {
	if c.all {
		return "every cluster"
	}
	if len(c.names) == 0 {
		return "no cluster"
	}
	names := make([]string, 0, len(c.names))
	for n := range c.names {
		names = append(names, n)
	}
	sort.Strings(names)
	const show = 5
	if len(names) > show {
		return strings.Join(names[:show], ", ") + fmt.Sprintf(" and %d more", len(names)-show)
	}
	return strings.Join(names, ", ")
}

type compiled struct {
	index   int
	pattern pattern
	export  clusters
	imports clusters
}

func (r compiled) name() string {
	return fmt.Sprintf("rule spec.rules[%d] (namespace %q)", r.index, r.pattern.raw)
}

// Decision is the policy's answer to one question.
type Decision struct {
	// Allowed is the answer.
	Allowed bool
	// Rule names the rule that decided, "" when none matched (or there is
	// no policy) and the default, everything allowed, applies.
	Rule string
	// Reason and Message explain a refusal (empty when Allowed).
	Reason, Message string
}

// MayExport says whether cluster may export the services of namespace.
func (p *Policy) MayExport(namespace, cluster string) Decision {
	return p.decide(namespace, cluster, ReasonExportNotPermitted, "export", func(r compiled) clusters { return r.export })
}

// MayImport says whether cluster imports the services of namespace.
func (p *Policy) MayImport(namespace, cluster string) Decision {
	return p.decide(namespace, cluster, ReasonImportNotPermitted, "import", func(r compiled) clusters { return r.imports })
}

func (p *Policy) decide(namespace, cluster, reason, verb string, set func(compiled) clusters) Decision {
	if p == nil {
		return Decision{Allowed: true}
	}
	if p.invalid != nil {
		return Decision{Reason: reason, Rule: "(invalid policy)",
			Message: clip(fmt.Sprintf("the clusterset policy does not parse, so nothing may %s: %v", verb, p.invalid), 1024)}
	}
	r, ok := p.match(namespace)
	if !ok {
		return Decision{Allowed: true}
	}
	s := set(r)
	if s.has(cluster) {
		return Decision{Allowed: true, Rule: r.name()}
	}
	who := cluster
	if who == "" {
		who = "a cluster without an id"
	} else {
		who = "cluster " + who
	}
	return Decision{Rule: r.name(), Reason: reason, Message: fmt.Sprintf(
		"the clusterset policy's %s lets %s %s namespace %s, not %s", r.name(), s, verb, namespace, who)}
}

// match returns the rule closest to namespace.
func (p *Policy) match(namespace string) (compiled, bool) {
	var best compiled
	found := false
	for _, r := range p.rules {
		if r.pattern.matches(namespace) && (!found || r.pattern.closer(best.pattern)) {
			best, found = r, true
		}
	}
	return best, found
}

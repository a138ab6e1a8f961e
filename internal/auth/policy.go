package auth

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"google.golang.org/grpc/metadata"
)

// Policy is a parsed authorization policy (see the package documentation).
type Policy struct {
	name  string
	deny  []rule
	allow []rule
}

type rule struct {
	name       string
	principals []matcher // empty: any caller, anonymous included
	paths      []matcher // empty: any method
	headers    []headerMatch
}

type headerMatch struct {
	key    string
	values []matcher
}

// matcher is one pattern of the gRPC authz format.
type matcher struct {
	kind  byte // '=' exact, '^' prefix, '$' suffix, '*' any non-empty
	value string
}

func newMatcher(v string) matcher {
	switch {
	case v == "*":
		return matcher{kind: '*'}
	case strings.HasSuffix(v, "*"):
		return matcher{kind: '^', value: strings.TrimSuffix(v, "*")}
	case strings.HasPrefix(v, "*"):
		return matcher{kind: '$', value: strings.TrimPrefix(v, "*")}
	}
	return matcher{kind: '=', value: v}
}

func (m matcher) match(s string) bool {
	switch m.kind {
	case '*':
		return s != ""
	case '^':
		return strings.HasPrefix(s, m.value)
	case '$':
		return strings.HasSuffix(s, m.value)
	}
	return s == m.value
}

func anyMatch(ms []matcher, s string) bool {
	for _, m := range ms {
		if m.match(s) {
			return true
		}
	}
	return false
}

// The JSON shape of gRPC's authz policy.
type jsonPolicy struct {
	Name       string     `json:"name"`
	DenyRules  []jsonRule `json:"deny_rules"`
	AllowRules []jsonRule `json:"allow_rules"`
}

type jsonRule struct {
	Name   string `json:"name"`
	Source struct {
		Principals []string `json:"principals"`
	} `json:"source"`
	Request struct {
		Paths   []string `json:"paths"`
		Headers []struct {
			Key    string   `json:"key"`
			Values []string `json:"values"`
		} `json:"headers"`
	} `json:"request"`
}

// Headers a policy may not match on, as in gRPC's authz: they are either
// transport details or set by gRPC itself.
var unsupportedHeaders = map[string]bool{
	"host": true, "connection": true, "keep-alive": true, "proxy-authenticate": true,
	"proxy-authorization": true, "te": true, "trailer": true, "transfer-encoding": true, "upgrade": true,
}

// ParsePolicy parses a policy in gRPC authz JSON. Unknown fields are errors,
// so a typo cannot silently widen access.
func ParsePolicy(data []byte) (*Policy, error) {
	var jp jsonPolicy
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&jp); err != nil {
		return nil, fmt.Errorf("parse policy: %w", err)
	}
	if jp.Name == "" {
		return nil, errors.New(`policy: "name" is missing`)
	}
	if len(jp.AllowRules) == 0 {
		return nil, errors.New(`policy: "allow_rules" is missing`)
	}
	p := &Policy{name: jp.Name}
	var err error
	if p.deny, err = parseRules(jp.DenyRules); err != nil {
		return nil, fmt.Errorf("policy: deny_rules %w", err)
	}
	if p.allow, err = parseRules(jp.AllowRules); err != nil {
		return nil, fmt.Errorf("policy: allow_rules %w", err)
	}
	return p, nil
}

func parseRules(in []jsonRule) ([]rule, error) {
	out := make([]rule, 0, len(in))
	for i, jr := range in {
		if jr.Name == "" {
			return nil, fmt.Errorf(`%d: "name" is missing`, i)
		}
		r := rule{name: jr.Name}
		for _, p := range jr.Source.Principals {
			r.principals = append(r.principals, newMatcher(p))
		}
		for _, p := range jr.Request.Paths {
			r.paths = append(r.paths, newMatcher(p))
		}
		for j, h := range jr.Request.Headers {
			key := strings.ToLower(h.Key)
			switch {
			case key == "":
				return nil, fmt.Errorf(`%d (%s): header %d: "key" is missing`, i, jr.Name, j)
			case key[0] == ':' || strings.HasPrefix(key, "grpc-") || unsupportedHeaders[key]:
				return nil, fmt.Errorf(`%d (%s): header %d: key %q is not supported`, i, jr.Name, j, key)
			case len(h.Values) == 0:
				return nil, fmt.Errorf(`%d (%s): header %d: "values" is missing`, i, jr.Name, j)
			}
			hm := headerMatch{key: key}
			for _, v := range h.Values {
				hm.values = append(hm.values, newMatcher(v))
			}
			r.headers = append(r.headers, hm)
		}
		out = append(out, r)
	}
	return out, nil
}

// LoadPolicy reads and parses a policy file.
func LoadPolicy(path string) (*Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read policy: %w", err)
	}
	p, err := ParsePolicy(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// Name returns the policy's name.
func (p *Policy) Name() string { return p.name }

// Request is what a policy decides on.
type Request struct {
	// Principal is the caller; empty when anonymous.
	Principal string
	// Method is the full gRPC method, "/package.Service/Method".
	Method string
	// Metadata is the call's incoming metadata.
	Metadata metadata.MD
}

// Decision is a policy's verdict with the rule that decided it ("" when no
// rule matched, which denies).
type Decision struct {
	Allowed bool
	Rule    string
}

// Decide applies the policy to req.
func (p *Policy) Decide(req Request) Decision {
	for _, r := range p.deny {
		if r.matches(req) {
			return Decision{Allowed: false, Rule: r.name}
		}
	}
	for _, r := range p.allow {
		if r.matches(req) {
			return Decision{Allowed: true, Rule: r.name}
		}
	}
	return Decision{}
}

func (r rule) matches(req Request) bool {
	if len(r.principals) > 0 && !anyMatch(r.principals, req.Principal) {
		return false
	}
	if len(r.paths) > 0 && !anyMatch(r.paths, req.Method) {
		return false
	}
	for _, h := range r.headers {
		found := false
		for _, v := range req.Metadata.Get(h.key) {
			if anyMatch(h.values, v) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

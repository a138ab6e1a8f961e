package config

import (
	"fmt"
	"net"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Source is a source cluster's membership service, as the importer's and
// repair's repeatable --source NAME=ADDR flag gives it.
type Source struct {
	// Name is the cluster's name in the clusterset.
	Name string
	// Addr is the gRPC target of its membership service.
	Addr string
}

// ParseSources reads NAME=ADDR pairs. Names must be unique DNS labels,
// since they become label values and ServiceImport cluster names; an
// address is host:port, a comma-separated list of host:port (replicas of
// the cluster's membership: streams go to one that is up), or a gRPC target
// with a scheme (dns:///...).
func ParseSources(specs []string) ([]Source, error) {
	out := make([]Source, 0, len(specs))
	seen := map[string]bool{}
	for _, s := range specs {
		name, addr, ok := strings.Cut(s, "=")
		name, addr = strings.TrimSpace(name), strings.TrimSpace(addr)
		if !ok || name == "" || addr == "" {
			return nil, fmt.Errorf("%q: want NAME=ADDR", s)
		}
		if msgs := validation.IsDNS1123Label(name); len(msgs) > 0 {
			return nil, fmt.Errorf("%q: name: %s", s, strings.Join(msgs, "; "))
		}
		if seen[name] {
			return nil, fmt.Errorf("source %q given twice", name)
		}
		if !strings.Contains(addr, "://") {
			for _, a := range strings.Split(addr, ",") {
				if _, _, err := net.SplitHostPort(strings.TrimSpace(a)); err != nil {
					return nil, fmt.Errorf("%q: address: %w", s, err)
				}
			}
		}
		seen[name] = true
		out = append(out, Source{Name: name, Addr: addr})
	}
	return out, nil
}

// Package layers checks the floors of the house: which packages may import
// which. The rules are the ones README's layout names: api/ is the ground
// floor, internal/ (the shared runtime) stands on it and on nothing above,
// the services do not reach into each other, and each service's pure core
// imports neither gRPC nor a Kubernetes client.
package layers

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/plexusnet/plexus/"

type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

// list runs go list over the whole module, from the module root.
func list(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps=false", "-json=ImportPath,Imports,Deps", "./...")
	cmd.Dir = "../.."
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("go list: %v\n%s", err, errb.String())
	}
	var pkgs []pkg
	dec := json.NewDecoder(&out)
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decoding go list: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 50 {
		t.Fatalf("go list found %d packages; expected the whole module", len(pkgs))
	}
	return pkgs
}

// rel strips the module path; "" for a package outside the module.
func rel(path string) string {
	if !strings.HasPrefix(path, module) {
		return ""
	}
	return strings.TrimPrefix(path, module)
}

// floor is the top-level folder of a module package, and for services/X
// the service's folder.
func floor(path string) string {
	parts := strings.Split(rel(path), "/")
	if parts[0] == "services" && len(parts) > 1 {
		return "services/" + parts[1]
	}
	return parts[0]
}

// harness reports whether a package is test support (it may start other
// services' servers).
func harness(path string) bool {
	r := rel(path)
	last := r[strings.LastIndex(r, "/")+1:]
	return strings.HasPrefix(r, "internal/testing/") || strings.HasSuffix(last, "test")
}

func TestFloors(t *testing.T) {
	var checked int
	for _, p := range list(t) {
		from := floor(p.ImportPath)
		for _, imp := range p.Imports {
			if rel(imp) == "" {
				continue
			}
			to := floor(imp)
			var bad string
			switch {
			case from == "api" && to != "api":
				bad = "api/ is the ground floor and imports nothing else of the module"
			case from == "internal" && !harness(p.ImportPath) && to != "internal" && to != "api":
				bad = "the shared runtime stands on api/ only"
			case strings.HasPrefix(from, "services/") && strings.HasPrefix(to, "services/") && from != to && !harness(p.ImportPath):
				bad = "a service does not import another service"
			}
			if bad != "" {
				t.Errorf("%s imports %s: %s", rel(p.ImportPath), rel(imp), bad)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no import within the module was checked")
	}
}

// cores are the pure decision packages (Makefile's CORE_PKGS).
var cores = []string{
	"internal/netparse", "internal/endpointrules", "internal/exportpolicy", "internal/owner",
	"services/allocator/ipam",
	"services/membership/selector", "services/membership/endpoints",
	"services/importer/slices", "services/importer/mcs", "services/importer/materialize",
	"services/repair/decide", "services/allocator/decide",
}

// forbidden are import path prefixes a pure core must not depend on, even
// indirectly: gRPC, the Kubernetes clients and caches, the stores.
var forbidden = []string{
	"google.golang.org/grpc",
	"k8s.io/client-go/kubernetes", "k8s.io/client-go/informers", "k8s.io/client-go/tools/cache",
	"k8s.io/client-go/rest", "sigs.k8s.io/mcs-api/pkg/client",
	"go.etcd.io/",
	"github.com/plexusnet/plexus/services/allocator/store",
}

// lockFree are the cores that take no lock and start no goroutine of
// their own: they import neither sync nor sync/atomic (their
// dependencies may). The runner around them holds the locks.
var lockFree = []string{
	"internal/netparse", "internal/endpointrules", "internal/exportpolicy", "internal/owner",
	"services/allocator/ipam", "services/allocator/decide",
	"services/membership/endpoints",
	"services/importer/slices", "services/importer/mcs", "services/importer/materialize",
}

func TestPureCores(t *testing.T) {
	byPath := map[string]pkg{}
	for _, p := range list(t) {
		byPath[rel(p.ImportPath)] = p
	}
	for _, c := range cores {
		p, ok := byPath[c]
		if !ok {
			t.Errorf("core package %s not found", c)
			continue
		}
		for _, d := range p.Deps {
			for _, f := range forbidden {
				if strings.HasPrefix(d, f) {
					t.Errorf("pure core %s depends on %s", c, d)
				}
			}
		}
	}
	for _, c := range lockFree {
		for _, imp := range byPath[c].Imports {
			if imp == "sync" || imp == "sync/atomic" {
				t.Errorf("pure core %s imports %s: the runner holds the locks", c, imp)
			}
		}
	}
}
